#!/usr/bin/env bash
# Rebuilds HCSim's LLaMA2-13B study (configs/studies/hcsim-llama2-13b/, docs/studies.md):
# batches per second from 64 to 1,024 XPUs without CXL, with a CXL fabric, and with CXL memory
# nodes, for H100 alone and half H100 with half A100 or V100; then CXL bandwidth and latency
# sweeps at 256 XPUs. Results: docs/studies/hcsim-llama2-13b/<sweep>/sweep.{csv,svg}.
#   FLEETSIM=target/release/fleetsim bash tools/run-hcsim-study.sh
set -euo pipefail
bin=${FLEETSIM:-target/release/fleetsim}
dir=configs/studies/hcsim-llama2-13b
out=docs/studies/hcsim-llama2-13b
mix='cluster.gpu_mix[1].gpu=H100-SXM,A100-SXM-80GB,V100'
scale='cluster.gpus+cluster.gpu_mix[0].hosts+cluster.gpu_mix[1].hosts'
scale_values='64+4+4,128+8+8,256+16+16,512+32+32,1024+64+64'
# With CXL the switch spans every server and holds one memory node per server.
cxl_scale="$scale+cluster.cxl.hosts_per_switch+cluster.cxl.memory_nodes_per_switch"
cxl_values='64+4+4+8+8,128+8+8+16+16,256+16+16+32+32,512+32+32+64+64,1024+64+64+128+128'
run() { local name=$1; shift; "$bin" sweep "$@" --plot-column batches_per_s --out "$out/$name" > /dev/null; echo "$name done"; }
run scale-no-cxl "$dir/base.toml" --vary "$mix" --vary "$scale=$scale_values"
run scale-cxl-fabric "$dir/cxl-fabric.toml" --vary "$mix" --vary "$cxl_scale=$cxl_values"
run scale-cxl-memory "$dir/cxl.toml" --vary "$mix" --vary "$cxl_scale=$cxl_values"
for base in cxl-fabric cxl; do
  run "$base-bandwidth" "$dir/$base.toml" --vary "$mix" --vary 'cluster.cxl.link_gb_s=16,32,64,128,256'
  run "$base-latency" "$dir/$base.toml" --vary "$mix" --vary 'cluster.latency_ns.cxl=100,250,500,1000,2000'
done
