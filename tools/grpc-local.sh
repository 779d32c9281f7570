#!/bin/bash
# One distributed run on this machine: a coordinator and WORKERS one-thread gRPC workers,
# each under `/usr/bin/time -v` (peak RSS per process), with the coordinator's metrics at
# http://127.0.0.1:$((PORT + 1000))/metrics while it runs.
#
#   tools/grpc-local.sh EXPERIMENT WORKERS PORT OUT [--set key=value ...]
#
# OUT gets coord.log, w0.log ... (each ending with its `time -v` report) and out/, the run's
# output directory. Run from the repository root after `cargo build --release`.
set -euo pipefail
exp=$1 workers=$2 port=$3 out=$4
shift 4
bin=${FLEETSIM:-target/release/fleetsim}
rm -rf "$out"
mkdir -p "$out"
head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n' >"$out/token"
/usr/bin/time -v "$bin" coordinator "$exp" --listen "127.0.0.1:$port" --workers "$workers" \
  --token-file "$out/token" --out "$out/out" --quiet --register-timeout 900 \
  --metrics-listen "127.0.0.1:$((port + 1000))" "$@" >"$out/coord.log" 2>&1 &
sleep 2
for ((w = 0; w < workers; w++)); do
  /usr/bin/time -v "$bin" worker --coordinator "127.0.0.1:$port" --token-file "$out/token" \
    --threads 1 >"$out/w$w.log" 2>&1 &
done
wait
grep -H "Maximum resident" "$out"/*.log
