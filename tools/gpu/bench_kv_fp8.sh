#!/usr/bin/env bash
# tools/gpu/bench_kv_fp8.sh: fp8 (e4m3) KV caches on the GPU (issue 27, --kv-cache-dtype fp8), side by
# side in one run: first the fp8 KV tests of tests/cuda; then the Llama-3-8B shape (bf16 weights) with
# a bf16 and an fp8 cache, alternated twice: decode at batch 1 / 16 / 32 over 8K and 32K contexts
# (points past the memory share pages, as marked), the decode attention kernel alone (batch 16 and
# 64), and prefill 4K and 32K; then MLA's latent cache the same way: DeepSeek-V2-Lite's layout (16
# heads, 3 layers) and DeepSeek-V3's 128 heads (2 layers) at batch 1 / 16 / 64 over 8K. Each decode
# line counts the weights and the KV bytes of its cache type against the measured copy and read-only
# rates. PARTS="gqa" or PARTS="mla" runs one half (default both); TESTS=0 skips the tests. Uses the
# binaries check.sh uses (built here, or the bundle of tools/gpu/pack.sh --check-only).
# Output: $OUT/kv_fp8_bench.jsonl, kv_fp8.log, test_kv_fp8.log, summary_kv_fp8.txt.
# Usage, from the repository root on the GPU machine: [PARTS=...] [TESTS=0] tools/gpu/bench_kv_fp8.sh BIN_DIR
set -uo pipefail
BIN=${1:?usage: tools/gpu/bench_kv_fp8.sh BIN_DIR}
OUT=${OUT:-/tmp/deepinfer-gpu-check}
mkdir -p "$OUT"
SUMMARY="$OUT/summary_kv_fp8.txt"
MODEL=/tmp/deepinfer-kv-fp8-model
: > "$SUMMARY"
if [ "${TESTS:-1}" != 0 ]; then
  timeout 300 "$BIN/test_cuda" --gtest_color=no \
    --gtest_filter='CudaKvFp8.*:CudaAttentionFp8Cache.*:CudaAttentionInvariance.*:CudaAttentionFrontEnd.*:CudaAttentionFrontFold.*:CudaAttentionBf16Cache.MmaDecodeEdges*:CudaAttentionBf16Cache.MlaDecode*:CudaMlaPrefill.*:CudaBatchInvariance.Fp8*' \
    > "$OUT/test_kv_fp8.log" 2>&1
  echo "test_cuda fp8 KV: exit $?; $(grep -c '^\[       OK \]' "$OUT/test_kv_fp8.log") passed, $(grep -c '^\[  FAILED  \].*ms)' "$OUT/test_kv_fp8.log") failed" | tee -a "$SUMMARY"
  grep -E 'fast path vs transformers|fp8 KV vs transformers|FAILED' "$OUT/test_kv_fp8.log" | tee -a "$SUMMARY"
fi
: > "$OUT/kv_fp8_bench.jsonl"
# bench MODEL_DIR TAG FLAGS...: both cache types, alternated twice; each figure a run's median of 8 steps.
bench() {
  local model=$1 tag=$2
  shift 2
  for round in 1 2; do
    for kv in fp8 bfloat16; do
      timeout 200 "$BIN/deepinfer" bench --device cuda --model "$model" --kv-cache-dtype "$kv" "$@" --steps 8 \
        --engine-batches 0 --no-products 2>> "$OUT/kv_fp8.log" |
        sed "s/^{/{\"config\":\"$tag-kv-$kv-r$round\",/" >> "$OUT/kv_fp8_bench.jsonl"
    done
  done
}
if [[ " ${PARTS:-gqa mla} " == *" gqa "* ]]; then
  rm -rf "$MODEL"
  "$BIN/deepinfer-make-random-model" --config bench/configs/llama3-8b.json --out "$MODEL" --dtype bf16 \
    >> "$OUT/kv_fp8.log" 2>&1 || { echo "model generation failed" | tee -a "$SUMMARY"; exit 1; }
  bench "$MODEL" llama3-8b --batches 1,16,32 --contexts 8192,32768 --prefill 4096,32768
  rm -rf "$MODEL"
fi
# MLA's latent cache: DeepSeek-V2-Lite's 16 heads (3 layers) and DeepSeek-V3's 128 (2 layers).
if [[ " ${PARTS:-gqa mla} " == *" mla "* ]]; then
  for config in deepseek-v2-lite-3l deepseek-v3-heads-2l; do
    rm -rf "$MODEL"
    "$BIN/deepinfer-make-random-model" --config "bench/configs/$config.json" --out "$MODEL" --dtype bf16 \
      >> "$OUT/kv_fp8.log" 2>&1 || { echo "$config: model generation failed" | tee -a "$SUMMARY"; continue; }
    bench "$MODEL" "$config" --batches 1,16,64 --contexts 8192 --prefill 4096
    rm -rf "$MODEL"
  done
fi
python3 tools/gpu/summarize_bench.py "$OUT/kv_fp8_bench.jsonl" | tee -a "$SUMMARY"
