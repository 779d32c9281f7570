#!/usr/bin/env bash
# The engine benchmarks of issue 4 ("Simulation engine"), as `fleetsim run` on real
# experiments: wall time, events/s, peak RSS, sync fraction and digest per run.
#
#   tools/bench-engine.sh                 # the five quick ones (about 4 minutes), and the
#                                         # two-thread speed-ups against one thread
#   tools/bench-engine.sh --scale 3600    # also llama3-405b on 8,192 GPUs in flow mode and
#                                         # on 131,072 GPUs in flow and packet mode, each
#                                         # stopped after 3600 s of wall time if not done
#
# Runs one at a time, so no run competes with another for cores. A run stopped at its limit
# reports its last progress line (simulated time reached) and its peak RSS at that moment;
# it is killed, not checkpointed (a 131,072-GPU checkpoint is gigabytes).
set -euo pipefail

cd "$(dirname "$0")/.."
scale_limit=0
if [[ "${1:-}" == "--scale" ]]; then
    scale_limit="${2:?--scale needs a limit in seconds}"
fi

cargo build --release --quiet
bin=target/release/fleetsim
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

# bench NAME LIMIT_S EXPERIMENT [ARGS...]
bench() {
    local name=$1 limit=$2 experiment=$3
    shift 3
    local dir="$out/$name"
    local started=$SECONDS
    # Not --quiet: with stderr not a terminal, progress comes as periodic log lines.
    "$bin" run "$experiment" --out "$dir" "$@" >"$dir.log" 2>&1 &
    local pid=$! hwm=0
    while kill -0 "$pid" 2>/dev/null; do
        hwm=$(awk '/VmHWM/ {print $2}' "/proc/$pid/status" 2>/dev/null || echo "$hwm") # kB
        if ((limit > 0 && SECONDS - started >= limit)); then
            kill -KILL "$pid" 2>/dev/null || true
            wait "$pid" 2>/dev/null || true
            printf '%-28s stopped after %d s at %s; peak RSS %.2f GB\n' "$name" "$limit" \
                "$(grep -o 'simulated [0-9.e-]* s' "$dir.log" | tail -1)" \
                "$(awk -v kb="$hwm" 'BEGIN {print kb / 1e6}')"
            return
        fi
        sleep 1
    done
    wait "$pid"
    python3 - "$name" "$dir/summary.json" <<'PY'
import json, sys
name, path = sys.argv[1], sys.argv[2]
s = json.load(open(path))
e = s["engine"]
print(f"{name:<28} wall {e['wall_s']:7.2f} s  {e['events']:>13,} events  "
      f"{e['events_per_s'] / 1e6:5.2f} M events/s  threads {e['threads']}  "
      f"sync {e['sync_fraction']:.3f}  peak RSS {e['peak_rss_bytes'] / 1e9:.2f} GB  "
      f"digest {s['result_digest']}")
PY
}

# speedup ONE TWO [BOUNDED]: the two-thread run TWO against the one-thread run ONE, and
# against the speed-up two threads could reach on the windows of a run with a barrier per
# window (`speedup_bound["2"]`): TWO's own, or BOUNDED's when TWO is asynchronous and has
# none. The check asks for at least 0.85 of the bound.
speedup() {
    python3 - "$out/$1/summary.json" "$out/$2/summary.json" "$2" "$out/${3:-$2}/summary.json" <<'PY'
import json, sys
one, two = (json.load(open(p))["engine"] for p in sys.argv[1:3])
bounded = json.load(open(sys.argv[4]))["engine"]
raw = one["wall_s"] / two["wall_s"]
bound = bounded["per_worker"][0]["speedup_bound"]
line = f"{sys.argv[3]:<28} speed-up {raw:.2f} over one thread"
if bound:
    b = bound["2"]
    verdict = "meets" if raw >= 0.85 * b else "misses"
    line += f"; bound {b:.2f}, {raw / b:.2f} of it ({verdict} 0.85)"
else:
    line += " (no run with a barrier per window to bound it)"
print(line)
PY
}

bench allreduce-64m-h100-128-ring 0 configs/experiments/allreduce-64m-h100-128.toml \
    --set collectives.algorithm=ring
bench gpt3-175b-h100-1024-t1 0 configs/experiments/gpt3-175b-h100-1024.toml --threads 1
bench gpt3-175b-h100-1024-t2 0 configs/experiments/gpt3-175b-h100-1024.toml --threads 2
bench gpt3-175b-h100-1024-t2-barrier 0 configs/experiments/gpt3-175b-h100-1024.toml \
    --threads 2 --set engine.scheduling=load-adaptive
speedup gpt3-175b-h100-1024-t1 gpt3-175b-h100-1024-t2 gpt3-175b-h100-1024-t2-barrier
speedup gpt3-175b-h100-1024-t1 gpt3-175b-h100-1024-t2-barrier
bench gpt3-175b-h100-1024-flow 0 configs/experiments/gpt3-175b-h100-1024.toml --threads 1 \
    --set network.model=flow --set network.segment_bytes=1048576
if ((scale_limit > 0)); then
    # Issue 11: the flow model on Llama 3 405B's 8,192-GPU cluster and at 131,072 GPUs.
    bench llama3-405b-h100-8192-flow "$scale_limit" \
        configs/experiments/llama3-405b-h100-16384.toml --threads 1 --set network.model=flow \
        --set cluster.gpus=8192 --set parallel.global_batch=1024
    bench llama3-405b-h100-131072-flow "$scale_limit" \
        configs/experiments/llama3-405b-h100-131072.toml --threads 1 --set network.model=flow
    bench llama3-405b-h100-131072-flow-t2 "$scale_limit" \
        configs/experiments/llama3-405b-h100-131072.toml --threads 2 --set network.model=flow
    # The issue's setting: 1 MiB segments (the preset itself uses 16 MiB).
    bench llama3-405b-h100-131072 "$scale_limit" \
        configs/experiments/llama3-405b-h100-131072.toml --set network.model=packet \
        --set network.segment_bytes=1048576
fi
