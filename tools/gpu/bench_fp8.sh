#!/usr/bin/env bash
# tools/gpu/bench_fp8.sh: FP8 block-scaled weights on the H200 (issue 27), side by side in one run:
# the Llama-3-8B shape with its projections in FP8 (DeepSeek-V3's 128 x 128 scale blocks) against
# the same shape in bf16, decode at batch 1 / 8 / 32 / 64 / 256 (1K context) and prefill 4K, each
# line with its bytes and its fraction of the measured copy and read-only rates (FP8 lines count
# FP8 bytes and scales); first the FP8 tests of tests/cuda. Uses the binaries check.sh uses (built
# here, or the bundle of tools/gpu/pack.sh --check-only). Output: $OUT/fp8_bench.jsonl, fp8.log,
# summary_fp8.txt.
# Usage, from the repository root on the GPU machine: tools/gpu/bench_fp8.sh BIN_DIR
set -uo pipefail
BIN=${1:?usage: tools/gpu/bench_fp8.sh BIN_DIR}
OUT=${OUT:-/tmp/deepinfer-gpu-check}
mkdir -p "$OUT"
SUMMARY="$OUT/summary_fp8.txt"
MODELS=/tmp/deepinfer-fp8-models
: > "$SUMMARY"
timeout 200 "$BIN/test_cuda" --gtest_color=no --gtest_filter='CudaFp8.*:*CudaFixture*deepseek_v3_fp8*' > "$OUT/test_fp8.log" 2>&1
echo "test_cuda FP8: exit $?; $(grep -c '^\[       OK \]' "$OUT/test_fp8.log") passed, $(grep -c '^\[  FAILED  \].*ms)' "$OUT/test_fp8.log") failed" | tee -a "$SUMMARY"
grep -E 'FP8 model vs|FAILED' "$OUT/test_fp8.log" | tee -a "$SUMMARY"
: > "$OUT/fp8_bench.jsonl"
rm -rf "$MODELS" && mkdir -p "$MODELS"
for dtype in fp8 bf16; do
  "$BIN/deepinfer-make-random-model" --config bench/configs/llama3-8b.json --out "$MODELS/$dtype" --dtype "$dtype" \
    >> "$OUT/fp8.log" 2>&1 || { echo "model generation ($dtype) failed" | tee -a "$SUMMARY"; exit 1; }
done
# Alternating the two models, twice: the same statistic (each run's median of 8 steps) on both sides.
for round in 1 2; do
  for dtype in fp8 bf16; do
    timeout 150 "$BIN/deepinfer" bench --device cuda --model "$MODELS/$dtype" --batches 1,8,32,64,256 \
      --contexts 1024 --prefill 4096 --steps 8 --engine-batches 0 2>> "$OUT/fp8.log" |
      sed "s/^{/{\"config\":\"llama3-8b-$dtype-r$round\",/" >> "$OUT/fp8_bench.jsonl"
  done
done
rm -rf "$MODELS"
python3 tools/gpu/summarize_bench.py "$OUT/fp8_bench.jsonl" | tee -a "$SUMMARY"
