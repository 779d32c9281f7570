#!/usr/bin/env bash
# What attention dropout costs (issue 10), in one run on one Hopper GPU (tools/device/README.md).
# Usage on the GPU machine: OUT=dir tools/device/dropout.sh
# 1. attention_dropout.py: causal attention fwd+bwd with dropout 0 and 0.1 on SDPA's default,
#    cuDNN and FlashAttention backends, at the Megatron-LM README rows' per-GPU shapes;
# 2. model_step.py: whole-model micro-batches of e2e_iterations.csv rows 10, 11 and 13 with
#    Megatron-LM's default attention dropout 0.1, and row 10 without, on the same machine.
set -u
OUT=${OUT:?set OUT to the folder for the results}
. tools/device/common.sh
run() { # name seconds command...
  local name=$1 secs=$2; shift 2
  echo "=== $name $(date -u +%T)" >>"$log"
  timeout "$secs" "$@" >"$OUT/$name" 2>>"$log"
  echo "=== $name rc=$? $(date -u +%T)" >>"$log"
}
run attention-dropout.csv 200 python3 $D/attention_dropout.py --warm 1.5 --iters 15
run model-step-dropout.txt 240 python3 $D/model_step.py \
  --cases readme-row10-tp1,readme-row11-tp2,readme-row13-tp8 --attention-dropout 0.1
run model-step-no-dropout.txt 90 python3 $D/model_step.py --cases readme-row10-tp1
kill $smi 2>/dev/null
date -u >>"$log"
