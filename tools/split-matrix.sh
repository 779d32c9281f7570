#!/usr/bin/env bash
# The full split matrix (tests/split_matrix.rs): every experiment under configs/experiments/
# and tests/fixtures/jobs|faults/ that runs within a minute on one worker, on workers 1-5 x
# every partition strategy, plus a seeded sample of threads, network models and gRPC. Run it
# before touching the engine (windows, promises, partitions, LPs). About 6 hours on 2 cores;
# ONLY runs a part.
#
#   tools/split-matrix.sh [SEED] [ONLY]
#
# SEED draws another sample (default 15); ONLY keeps the experiments whose path contains it.
# The report (one line per experiment, every failure named) goes to stdout and
# runs/split-matrix.log.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p runs
export FLEETSIM_SPLIT_MATRIX=full
export FLEETSIM_SPLIT_MATRIX_SEED="${1:-15}"
[ -n "${2:-}" ] && export FLEETSIM_SPLIT_MATRIX_ONLY="$2"
cargo test --release --test split_matrix -- --nocapture 2>&1 | tee runs/split-matrix.log
