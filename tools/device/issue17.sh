#!/usr/bin/env bash
# Issue 17 on a lent Hopper GPU (one call, about 3 minutes): what the host costs to issue work
# (C++ launches, PyTorch ops, a GPT layer eager and as CUDA graphs) and MoE grouped GEMMs at
# per-expert token counts. Usage on the GPU machine: OUT=dir tools/device/issue17.sh
# Results and provenance: sim/tests/calibration/h200-measured/README.md.
set -u
OUT=${OUT:?set OUT to the folder for the results}
export PYTHONUNBUFFERED=1
D=tools/device
log=$OUT/issue17-log.txt
{
  date -u
  nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv
  lscpu | grep -E 'Model name|^CPU\(s\)|Thread|MHz|Socket'
  python3 -c "import torch; print('torch', torch.__version__, torch.cuda.get_device_name())"
  nvcc --version | tail -2
} >"$log" 2>&1
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,clocks_throttle_reasons.active \
  --format=csv -lms 250 >"$OUT/issue17-smi.csv" 2>&1 &
smi=$!
echo "=== launch $(date -u +%T)" >>"$log"
(nvcc -O2 -arch=sm_90 $D/launch.cu -o /tmp/launch && timeout 60 /tmp/launch) >"$OUT/launch.csv" 2>>"$log"
echo "=== launch rc=$? $(date -u +%T)" >>"$log"
echo "=== host-dispatch $(date -u +%T)" >>"$log"
timeout 150 python3 $D/host_dispatch.py >"$OUT/host-dispatch.csv" 2>>"$log"
echo "=== host-dispatch rc=$? $(date -u +%T)" >>"$log"
echo "=== grouped-gemm $(date -u +%T)" >>"$log"
timeout 200 python3 $D/grouped_gemm.py >"$OUT/grouped-gemm.csv" 2>>"$log"
echo "=== grouped-gemm rc=$? $(date -u +%T)" >>"$log"
kill $smi 2>/dev/null
date -u >>"$log"
cat "$log" "$OUT"/*.csv | grep -v '^20[0-9][0-9]/' | head -200
