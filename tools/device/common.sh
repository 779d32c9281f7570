# Shared by the device runs (issue10.sh, h200.sh, fp8_accum.sh): the log's header, nvidia-smi
# sampling and `step NAME SECONDS ARGS...`, which runs profile_kernels.py with its own time
# limit and writes $OUT/NAME.csv. Source it with OUT set.
export PYTHONUNBUFFERED=1
log=$OUT/log.txt
{
  date -u
  nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.memory,power.limit --format=csv
  python3 -c "import torch; print('torch', torch.__version__, 'cudnn', torch.backends.cudnn.version(), torch.cuda.get_device_name(), torch.cuda.get_device_capability())"
} >"$log" 2>&1
# Clock, power and throttle reasons every 250 ms until the caller kills $smi.
nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,clocks_throttle_reasons.active \
  --format=csv -lms 250 >"$OUT/smi.csv" 2>&1 &
smi=$!
D=tools/device
step() { # name seconds args...
  local name=$1 secs=$2; shift 2
  echo "=== $name $(date -u +%T)" >>"$log"
  timeout "$secs" $P "$@" --out "$OUT/$name.csv" >>"$log" 2>&1
  echo "=== $name rc=$? $(date -u +%T)" >>"$log"
}
