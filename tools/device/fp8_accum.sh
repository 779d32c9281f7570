#!/usr/bin/env bash
# What cuBLASLt's FP8 fast accumulation is worth at the IR's GEMM shapes (issue 17; about 2.5
# minutes on an H200). Transformer Engine runs the forward FP8 GEMM with it on Hopper and the
# dgrad and wgrad without; fleetsim's FP8 GEMM fit was measured without it
# (sim/tests/calibration/h100-measured/gemm-fp8-steady.csv). Times gemm-template.csv twice, in
# steady state, with fast accumulation off and on, one after the other on the same GPU.
# Usage on the GPU machine: OUT=dir tools/device/fp8_accum.sh
set -u
OUT=${OUT:?set OUT to the folder for the results}
P="python3 tools/profile_kernels.py --warmup 5 --iters 20"
. tools/device/common.sh
step gemm-fp8-accum-off 80 --template $D/gemm-template.csv --clock steady --fp8-fast-accum off
step gemm-fp8-accum-on 80 --template $D/gemm-template.csv --clock steady --fp8-fast-accum on
kill $smi 2>/dev/null
date -u >>"$log"
tail -4 "$log"
