#!/usr/bin/env bash
# tools/gpu/bench_kv_fp8.sh: fp8 (e4m3) KV caches on the GPU (issue 27, --kv-cache-dtype fp8), side by
# side in one run: first the fp8 KV tests of tests/cuda, then the Llama-3-8B shape (bf16 weights) with
# a bf16 and an fp8 cache, alternated twice: decode at batch 1 / 16 / 32 over 8K and 32K contexts
# (points past the memory share pages, as marked), the decode attention kernel alone (batch 16 and
# 64), and prefill 4K and 32K. Each decode line counts the weights and the KV bytes of its cache type
# against the measured copy and read-only rates. Uses the binaries check.sh uses (built here, or the bundle of tools/gpu/pack.sh --check-only).
# Output: $OUT/kv_fp8_bench.jsonl, kv_fp8.log, test_kv_fp8.log, summary_kv_fp8.txt.
# Usage, from the repository root on the GPU machine: tools/gpu/bench_kv_fp8.sh BIN_DIR
set -uo pipefail
BIN=${1:?usage: tools/gpu/bench_kv_fp8.sh BIN_DIR}
OUT=${OUT:-/tmp/deepinfer-gpu-check}
mkdir -p "$OUT"
SUMMARY="$OUT/summary_kv_fp8.txt"
MODEL=/tmp/deepinfer-kv-fp8-model
: > "$SUMMARY"
timeout 300 "$BIN/test_cuda" --gtest_color=no \
  --gtest_filter='CudaKvFp8.*:CudaAttentionFp8Cache.*:CudaAttentionInvariance.*:CudaAttentionFrontEnd.*:CudaAttentionFrontFold.*:CudaAttentionBf16Cache.MmaDecodeEdges*:CudaMlaPrefill.*:CudaBatchInvariance.Fp8*' \
  > "$OUT/test_kv_fp8.log" 2>&1
echo "test_cuda fp8 KV: exit $?; $(grep -c '^\[       OK \]' "$OUT/test_kv_fp8.log") passed, $(grep -c '^\[  FAILED  \].*ms)' "$OUT/test_kv_fp8.log") failed" | tee -a "$SUMMARY"
grep -E 'fast path vs transformers|fp8 KV vs transformers|FAILED' "$OUT/test_kv_fp8.log" | tee -a "$SUMMARY"
: > "$OUT/kv_fp8_bench.jsonl"
rm -rf "$MODEL"
"$BIN/deepinfer-make-random-model" --config bench/configs/llama3-8b.json --out "$MODEL" --dtype bf16 \
  >> "$OUT/kv_fp8.log" 2>&1 || { echo "model generation failed" | tee -a "$SUMMARY"; exit 1; }
# Each run's median of 8 steps, the same statistic on both sides; the two cache types alternate.
for round in 1 2; do
  for kv in fp8 bfloat16; do
    timeout 200 "$BIN/deepinfer" bench --device cuda --model "$MODEL" --kv-cache-dtype "$kv" --batches 1,16,32 \
      --contexts 8192,32768 --prefill 4096,32768 --steps 8 --engine-batches 0 --no-products 2>> "$OUT/kv_fp8.log" |
      sed "s/^{/{\"config\":\"llama3-8b-kv-$kv-r$round\",/" >> "$OUT/kv_fp8_bench.jsonl"
  done
done
rm -rf "$MODEL"
python3 tools/gpu/summarize_bench.py "$OUT/kv_fp8_bench.jsonl" | tee -a "$SUMMARY"
