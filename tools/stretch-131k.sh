#!/usr/bin/env bash
# Compares fleetsim binaries on a stretch of llama3-405b-h100-131072 (1 MiB segments): the
# wall time from FROM to TO seconds simulated (default 0.0005 to 0.0025, in the parameter
# all-gather), read off the progress lines. The machines are noisy, so the binaries take
# turns, three rounds.
#
#   THREADS=1 tools/stretch-131k.sh BIN_A BIN_B ...   # one line "BIN SECONDS" per run
#
# RESUME=DIR starts each run from a checkpoint of the same experiment and settings
# (`fleetsim run --checkpoint-dir`), to time a later phase: the gradient reduce-scatter
# runs from about 7.5 s. Each run is killed after LIMIT seconds (default 100), once past
# the stretch.
set -euo pipefail

cd "$(dirname "$0")/.."
experiment=configs/experiments/llama3-405b-h100-131072.toml
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

for _round in 1 2 3; do
    for bin in "$@"; do
        # The braces keep the shell's "Killed" notice out of the output.
        { timeout -s KILL "${LIMIT:-100}" "$bin" run "$experiment" \
            --set network.model=packet --set network.segment_bytes=1048576 --threads "${THREADS:-1}" \
            ${RESUME:+--resume "$RESUME"} --out "$out/run" >"$out/log" 2>&1 || true; } 2>/dev/null
        # Progress lines: "simulated S s, wall W s"; interpolate W at S = FROM and TO.
        sed -nE 's/.*simulated ([0-9.e-]+) s, wall ([0-9.]+) s.*/\1 \2/p' "$out/log" |
            awk -v bin="$bin" -v from="${FROM:-0.0005}" -v to="${TO:-0.0025}" '
                function at(t) { return pw + ($2 - pw) * (t - ps) / ($1 - ps) }
                $1 >= from && !a { a = at(from) }
                $1 >= to && !b { b = at(to) }
                { ps = $1; pw = $2 }
                END { if (b) printf "%s %.1f\n", bin, b - a; else print bin, "not reached" }'
        rm -rf "$out/run"
    done
done
