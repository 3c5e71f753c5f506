#!/usr/bin/env bash
# tools/gpu/bench_mxfp4.sh: GPT-OSS-20B with its experts in MXFP4 as published (issue 27) against the
# same shape in bf16, side by side in one run: decode at batch 1 and 64 (1K context) and prefill 4K,
# each line with its bytes (MXFP4 lines count codes and scales) and its fraction of the measured copy
# and read-only rates; first the MXFP4 tests of tests/cuda. Uses the binaries check.sh uses (built
# here, or the bundle of tools/gpu/pack.sh --check-only). The two checkpoints take 13 and 42 GB of
# disk; on an H100 one round of both runs, with their per-product lines, took about four minutes.
# ROUNDS (default 2): how many times the two models alternate; TESTS=0 skips the tests. Output:
# $OUT/mxfp4_bench.jsonl, mxfp4.log, summary_mxfp4.txt. MODELS_DIR (default /tmp/deepinfer-mxfp4-models)
# holds the two checkpoints: /dev/shm/... keeps them off the device's disk (its 128 GB of RAM hold both).
# Usage, from the repository root on the GPU machine: [ROUNDS=1] [TESTS=0] tools/gpu/bench_mxfp4.sh BIN_DIR
set -uo pipefail
BIN=${1:?usage: tools/gpu/bench_mxfp4.sh BIN_DIR}
OUT=${OUT:-/tmp/deepinfer-gpu-check}
mkdir -p "$OUT"
SUMMARY="$OUT/summary_mxfp4.txt"
MODELS=${MODELS_DIR:-/tmp/deepinfer-mxfp4-models}
: > "$SUMMARY"
if [ "${TESTS:-1}" != 0 ]; then
  timeout 300 "$BIN/test_cuda" --gtest_color=no \
    --gtest_filter='CudaMoeExperts.Mxfp4*:CudaMxfp4.*:*CudaFixture.*gpt_oss*:CudaFp8.Backend*' > "$OUT/test_mxfp4.log" 2>&1
  echo "test_cuda MXFP4: exit $?; $(grep -c '^\[       OK \]' "$OUT/test_mxfp4.log") passed, $(grep -c '^\[  FAILED  \].*ms)' "$OUT/test_mxfp4.log") failed" | tee -a "$SUMMARY"
  grep -E 'MXFP4 experts packed|FAILED' "$OUT/test_mxfp4.log" | tee -a "$SUMMARY"
fi
: > "$OUT/mxfp4_bench.jsonl"
rm -rf "$MODELS" && mkdir -p "$MODELS"
trap 'rm -rf "$MODELS"' EXIT  # 55 GB, whatever ends the script
for dtype in mxfp4 bf16; do
  "$BIN/deepinfer-make-random-model" --config bench/configs/gpt-oss-20b.json --out "$MODELS/$dtype" --dtype "$dtype" \
    >> "$OUT/mxfp4.log" 2>&1 || { echo "model generation ($dtype) failed" | tee -a "$SUMMARY"; exit 1; }
done
# Alternating the two models, twice: the same statistic (each run's median of 8 steps) on both sides.
for round in $(seq "${ROUNDS:-2}"); do
  for dtype in mxfp4 bf16; do
    timeout 360 "$BIN/deepinfer" bench --device cuda --model "$MODELS/$dtype" --batches 1,64 --contexts 1024 \
      --prefill 4096 --steps 8 --engine-batches 0 2>> "$OUT/mxfp4.log" |
      sed "s/^{/{\"config\":\"gpt-oss-20b-$dtype-r$round\",/" >> "$OUT/mxfp4_bench.jsonl"
    echo "$dtype round $round: exit ${PIPESTATUS[0]}" >> "$OUT/mxfp4.log"
  done
done
rm -rf "$MODELS"
python3 tools/gpu/summarize_bench.py "$OUT/mxfp4_bench.jsonl" | tee -a "$SUMMARY"
