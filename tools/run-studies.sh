#!/usr/bin/env bash
# Runs the four design studies of configs/studies/ and writes their tables and plots under
# docs/studies/ (see docs/studies.md). About 30 minutes on 2 cores, release build.
#   bash tools/run-studies.sh [study ...]   # network-bandwidth tp-nvlink-domain hetero-naive rail-vs-fat-tree
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --quiet
bin=target/release/fleetsim
out=docs/studies
studies=("$@")
[ ${#studies[@]} -eq 0 ] && studies=(network-bandwidth tp-nvlink-domain hetero-naive rail-vs-fat-tree)
for study in "${studies[@]}"; do
  case "$study" in
    network-bandwidth)
      $bin sweep configs/studies/network-bandwidth.toml \
        --vary cluster.gpu=H100-SXM,H20 --vary cluster.nic_gbps=100,200,400 \
        --out $out/network-bandwidth ;;
    tp-nvlink-domain)
      # TP sizes each model's head count allows (40, 64 and 96 heads).
      for m in gpt3-13b:2,4,8 llama-65b:8,16,32,64 gpt3-175b:8,16,32; do
        $bin sweep configs/studies/tp-nvlink-domain.toml --set model.preset="${m%%:*}" \
          --vary parallel.tp="${m#*:}" --vary cluster.nvlink_domain=8,16,32,64 \
          --out "$out/tp-nvlink-domain/${m%%:*}"
      done ;;
    hetero-naive)
      $bin sweep configs/studies/hetero-naive.toml \
        --vary 'cluster.gpu_mix[0].gpu=A100-SXM-80GB,H100-SXM' \
        --vary 'cluster.gpu_mix[1].gpu=A100-SXM-80GB,H100-SXM' \
        --out $out/hetero-naive ;;
    rail-vs-fat-tree)
      $bin sweep configs/studies/rail-vs-fat-tree.toml \
        --vary cluster.oversubscription=1,2 --vary cluster.topology=rail-optimized,fat-tree \
        --out $out/rail-vs-fat-tree ;;
    *) echo "unknown study $study" >&2; exit 2 ;;
  esac
done
