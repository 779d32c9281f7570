#!/usr/bin/env bash
# Issue 10's kernel measurements on one Hopper GPU, in one run (see tools/device/README.md).
# Usage on the GPU machine: OUT=dir tools/device/issue10.sh
# Each step has its own time limit, and profile_kernels.py writes its table after every row,
# so a slow step costs only itself.
set -u
OUT=${OUT:?set OUT to the folder for the results}
export PYTHONUNBUFFERED=1
log=$OUT/log.txt
{
  date -u
  nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.memory,power.limit --format=csv
  python3 -c "import torch; print('torch', torch.__version__, 'cudnn', torch.backends.cudnn.version(), torch.cuda.get_device_name(), torch.cuda.get_device_capability())"
} >"$log" 2>&1
# Clock, power and throttle reasons every 250 ms for the whole run.
nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_throttle_reasons.active \
  --format=csv -lms 250 >"$OUT/smi.csv" 2>&1 &
smi=$!
P="python3 tools/profile_kernels.py --warmup 5 --iters 20"
D=tools/device
step() { # name seconds args...
  local name=$1 secs=$2; shift 2
  echo "=== $name $(date -u +%T)" >>"$log"
  timeout "$secs" $P "$@" --out "$OUT/$name.csv" >>"$log" 2>&1
  echo "=== $name rc=$? $(date -u +%T)" >>"$log"
}
step attention-steady 130 --template $D/attention-template.csv --clock steady
step gemm-fp8-steady 130 --template $D/gemm-template.csv --clock steady
step attention-burst 100 --template $D/attention-template.csv --clock burst
step gemm-fp8-burst 100 --template $D/gemm-template.csv --clock burst
step crosscheck-steady 50 --template $D/crosscheck-template.csv --clock steady --attention flash
kill $smi 2>/dev/null
date -u >>"$log"
