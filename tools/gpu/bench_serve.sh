#!/usr/bin/env bash
# tools/gpu/bench_serve.sh: the HTTP server under load on the H200: `deepinfer serve --device cuda` on
# a random Llama-3-8B-shaped bf16 checkpoint (bench/configs/llama3-8b.json) with the real Llama 3
# tokenizer, then `deepinfer bench serve` (streaming /v1/completions, vLLM benchmark_serving style)
# at CONCURRENCY levels. Uses the bundle `tools/gpu/pack.sh --serve-only` made (the full one and the
# tokenizer do not fit the device's upload beside the tree) and the tokenizer archive it packs
# (build-cuda/llama3-tokenizer.tar.xz). Output: $OUT/serve_bench.jsonl (one line a level) and the logs.
# INPUT / OUTPUT: tokens per request (default 1024 / 128); PROMPTS: requests per level (default 4 x
# the concurrency, at least 8).
set -uo pipefail
OUT=${OUT:-/tmp/deepinfer-serve-bench}
CONCURRENCY=${CONCURRENCY:-1,4,16,64,256}
INPUT=${INPUT:-1024}
OUTPUT=${OUTPUT:-128}
mkdir -p "$OUT" /tmp/deepinfer-bundle
tar -xJf build-cuda/gpu-bundle.tar.xz -C /tmp/deepinfer-bundle
export LD_LIBRARY_PATH=/tmp/deepinfer-bundle/lib:${LD_LIBRARY_PATH:-}
bin=/tmp/deepinfer-bundle/bin
model=/tmp/serve-models/llama3-8b
mkdir -p "$model"
"$bin/deepinfer-make-random-model" --config bench/configs/llama3-8b.json --out "$model" --dtype bf16 > /dev/null 2>> "$OUT/serve.log" ||
  { echo "model generation failed (tail of $OUT/serve.log):"; tail -5 "$OUT/serve.log"; exit 1; }
tar -xJf build-cuda/llama3-tokenizer.tar.xz -C "$model"
"$bin/deepinfer" serve --device cuda --model "$model" --port 0 --max-num-seqs 256 --served-model-name llama3-8b-random \
  > "$OUT/serve.log" 2>&1 &
server=$!
trap 'kill $server 2>/dev/null' EXIT
for _ in $(seq 600); do grep -q "listening on" "$OUT/serve.log" && break; kill -0 $server 2>/dev/null || break; sleep 0.5; done
url=$(sed -n 's/.*listening on \(http:[^ ]*\).*/\1/p' "$OUT/serve.log")
[ -n "$url" ] || { echo "the server did not start (tail of $OUT/serve.log):"; tail -20 "$OUT/serve.log"; exit 1; }
prompts=()
[ -n "${PROMPTS:-}" ] && prompts=(--num-prompts "$PROMPTS")
"$bin/deepinfer" bench serve --url "$url" --concurrency "$CONCURRENCY" --input-tokens "$INPUT" --output-tokens "$OUTPUT" \
  "${prompts[@]}" --json "$OUT/serve_bench.jsonl" \
  --label "H200, deepinfer serve --device cuda, random Llama-3-8B shape (bf16), commit $(git rev-parse --short HEAD 2>/dev/null || echo '?')"
