#!/usr/bin/env bash
# Runs `fleetsim plan` on every heterogeneity preset (configs/experiments/hetero-h*-*.toml) and
# collects the gains table in docs/studies/hetero-plans/gains.csv; each plan's text and JSON
# go beside it. About 15 min on 2 cores (release build).
#   FLEETSIM=target/release/fleetsim bash tools/run-hetero-plans.sh
set -euo pipefail
bin=${FLEETSIM:-target/release/fleetsim}
out=docs/studies/hetero-plans
mkdir -p "$out"
echo "preset,level,model,gpus,naive_s,uniform_s,plan_s,gain,placement_gain,plan" > "$out/gains.csv"
for f in configs/experiments/hetero-h[0-4]-*.toml; do
  name=$(basename "$f" .toml)
  "$bin" plan "$f" --out "$out/$name" > /dev/null
  python3 - "$out/$name/plan.json" "$name" >> "$out/gains.csv" <<'PY'
import json, sys
p = json.load(open(sys.argv[1])); name = sys.argv[2]
level, model, gpus = name.split("-")[1], "-".join(name.split("-")[2:-1]), name.split("-")[-1]
c = p["plan"]
desc = f'{c["placement"]} TP{c["tp"]} PP{c["pp"]} VP{c["vp"]} MBS{c["micro_batch"]}'
print(f'{name},{level.upper()},{model},{gpus},{p["naive_iteration_time_s"]:.4f},{p["uniform_iteration_time_s"]:.4f},'
      f'{p["plan_iteration_time_s"]:.4f},{p["gain"]*100:.1f}%,{p["placement_gain"]*100:.1f}%,{desc}')
PY
  tail -1 "$out/gains.csv"
done
