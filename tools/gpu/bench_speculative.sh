#!/usr/bin/env bash
# tools/gpu/bench_speculative.sh: issue 22's replay measurement on the H200. Random bf16
# Llama-3-8B-shaped models of each of LAYERS layers (default "8 32"), drafts replayed from the
# engine's own greedy output with each corrupted at RATE (default 0.2: acceptance 0.8 a draft), K
# drafts (default 3), through the engine at each CONCURRENCY (default 1,32): plain decoding, DSpark's
# varlen budget and fixed K side by side in one process (`deepinfer bench --draft-replay`). Uses the
# bundle tools/gpu/pack.sh made. Output: $OUT/speculative_bench.jsonl (one line per model and
# concurrency), $OUT/speculative_bench.log.
set -uo pipefail
OUT=${OUT:-/tmp/deepinfer-speculative-bench}
LAYERS=${LAYERS:-"8 32"}
RATE=${RATE:-0.2}
K=${K:-3}
CONCURRENCY=${CONCURRENCY:-1,32}
mkdir -p "$OUT" /tmp/deepinfer-bundle
JSON="$OUT/speculative_bench.jsonl"
LOG="$OUT/speculative_bench.log"
: > "$JSON"
: > "$LOG"
[ -x /tmp/deepinfer-bundle/bin/deepinfer ] || tar -xJf build-cuda/gpu-bundle.tar.xz -C /tmp/deepinfer-bundle
export LD_LIBRARY_PATH=/tmp/deepinfer-bundle/lib:${LD_LIBRARY_PATH:-}
BIN=/tmp/deepinfer-bundle/bin
for layers in $LAYERS; do
  model=/tmp/speculative-llama-$layers
  python3 - bench/configs/llama3-8b.json "$model.json" "$layers" <<'PY'
import json, sys
config = json.load(open(sys.argv[1])); config["num_hidden_layers"] = int(sys.argv[3])
json.dump(config, open(sys.argv[2], "w"))
PY
  "$BIN/deepinfer-make-random-model" --config "$model.json" --out "$model" --dtype bf16 > /dev/null 2>> "$LOG" ||
    { echo "$layers layers: model generation failed ($LOG)"; continue; }
  timeout 400 "$BIN/deepinfer" bench --device cuda --model "$model" --speculative-tokens "$K" --draft-replay "$RATE" \
    --concurrency "$CONCURRENCY" 2>> "$LOG" | grep '^{' | tee -a "$JSON"
  rm -rf "$model"
done
