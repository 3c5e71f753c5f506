#!/usr/bin/env bash
# tools/bench_kv_cache_dtype.sh: decode after a long prompt with float32, bf16 and fp8 KV caches,
# RUNS interleaved runs of each (`deepinfer bench --repeats 1`), one JSON line per run on stdout.
# Usage, from the repository root after a build:
#   build/bin/deepinfer-make-random-model --config bench/configs/qwen3-mini.json --out /tmp/qmini --dtype bf16
#   MODEL=/tmp/qmini tools/bench_kv_cache_dtype.sh > out.jsonl
set -euo pipefail
MODEL=${MODEL:?set MODEL to a model directory}
CONTEXTS=${CONTEXTS:-"1024 4096 8000"}
RUNS=${RUNS:-3}
BIN=${BIN:-build/bin/deepinfer}
for context in $CONTEXTS; do
  for run in $(seq 1 "$RUNS"); do
    for dtype in float32 bfloat16 fp8; do
      "$BIN" bench --model "$MODEL" --prompt-tokens "$context" --decode-tokens 32 --repeats 1 \
        --kv-cache-dtype "$dtype" 2>/dev/null | tail -1 | sed "s/}\$/,\"run\":$run}/"
    done
  done
done
