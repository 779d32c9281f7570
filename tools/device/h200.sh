#!/usr/bin/env bash
# Issue 10 on an H200 (one run, about 5 minutes): the H100 tables' kernels, the clock and power
# of kernel classes and mixes, and two whole-model micro-batches, to check the H200 GPU file
# against the same measurements the Hopper fit was made from (see tools/device/README.md).
# Usage on the GPU machine: OUT=dir tools/device/h200.sh
set -u
OUT=${OUT:?set OUT to the folder for the results}
P="python3 tools/profile_kernels.py --warmup 5 --iters 20 --gpu H200-SXM"
. tools/device/common.sh
step attention-cudnn-steady 70 --template $D/attention-template.csv --clock steady
step gemm-fp8-steady 70 --template $D/gemm-template.csv --clock steady
step kernels-bf16-steady 150 --template $D/h200-bf16-template.csv --clock steady
kill $smi 2>/dev/null
echo "=== power-mix $(date -u +%T)" >>"$log"
timeout 110 python3 $D/power_mix.py --seconds 6 --more --samples "$OUT/power-mix-smi.csv" >"$OUT/power-mix.txt" 2>&1
echo "=== power-mix rc=$? $(date -u +%T)" >>"$log"
echo "=== model-step $(date -u +%T)" >>"$log"
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,clocks_throttle_reasons.active --format=csv -lms 500 >"$OUT/model-step-smi.csv" 2>&1 &
smi=$!
timeout 80 python3 $D/model_step.py --cases readme-row10-tp1,readme-row13-tp8 >"$OUT/model-step.txt" 2>&1
echo "=== model-step rc=$? $(date -u +%T)" >>"$log"
kill $smi 2>/dev/null
date -u >>"$log"
