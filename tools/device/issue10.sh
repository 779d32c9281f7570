#!/usr/bin/env bash
# Issue 10's kernel measurements on one Hopper GPU, in one run (see tools/device/README.md).
# Usage on the GPU machine: OUT=dir tools/device/issue10.sh
# Each step has its own time limit, and profile_kernels.py writes its table after every row,
# so a slow step costs only itself.
set -u
OUT=${OUT:?set OUT to the folder for the results}
P="python3 tools/profile_kernels.py --warmup 5 --iters 20"
. tools/device/common.sh
step attention-steady 130 --template $D/attention-template.csv --clock steady
step gemm-fp8-steady 130 --template $D/gemm-template.csv --clock steady
step attention-burst 100 --template $D/attention-template.csv --clock burst
step gemm-fp8-burst 100 --template $D/gemm-template.csv --clock burst
step crosscheck-steady 50 --template $D/crosscheck-template.csv --clock steady --attention flash
kill $smi 2>/dev/null
date -u >>"$log"
