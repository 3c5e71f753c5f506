#!/usr/bin/env bash
# tools/gpu/check.sh: the CUDA backend's whole check on the GPU machine in one command (< 9 min):
# builds it (Release, sm_90a, -j16; or unpacks the bundle tools/gpu/pack.sh made when this machine
# lacks the host libraries), runs tests/cuda (every CUDA op against kernels/ref, the transformers
# fixtures on --device cuda, bf16 vs float32, batch invariance) and two expert-parallel ranks sharing
# the GPU against one, then `deepinfer bench --device cuda`
# on random Llama-3-8B- and Qwen3-8B-shaped bf16 models. Logs and summary.txt go to $OUT.
# Usage, from the repository root: tools/gpu/check.sh [--no-bench] [--long]
# (32K prefill runs on the Llama shape; --long adds it for Qwen3 too.)
set -uo pipefail
OUT=${OUT:-/tmp/deepinfer-gpu-check}
mkdir -p "$OUT"
SUMMARY="$OUT/summary.txt"
: > "$SUMMARY"
START=$(date +%s)
BENCH=1
LONG=0
for arg in "$@"; do
  case "$arg" in
    --no-bench) BENCH=0 ;;
    --long) LONG=1 ;;
    *) echo "unknown flag $arg" >&2; exit 2 ;;
  esac
done
note() { echo "$*" | tee -a "$SUMMARY"; }
elapsed() { echo $(( $(date +%s) - START )); }

note "== deepinfer GPU check $(date -u +%FT%TZ) commit $(git rev-parse --short HEAD 2>/dev/null || echo '?')"
nvidia-smi --query-gpu=name,memory.total,memory.used,driver_version,clocks.sm --format=csv,noheader 2>&1 | tee -a "$SUMMARY"

# 1. Build here, or fall back to the carried bundle.
BIN=""
BUILD_DIR=build-gpu
if cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90a \
     -DDEEPINFER_CUDA=ON -DBUILD_TESTING=ON -DDEEPINFER_BENCH=ON > "$OUT/build.log" 2>&1 &&
   cmake --build "$BUILD_DIR" --target test_cuda deepinfer deepinfer-make-random-model -j16 >> "$OUT/build.log" 2>&1; then
  BIN="$BUILD_DIR/bin"
  note "build: built here in $(elapsed) s"
elif [ -f build-cuda/gpu-bundle.tar.xz ]; then
  note "build: this machine cannot build it (tail of build.log below); using build-cuda/gpu-bundle.tar.xz"
  tail -5 "$OUT/build.log" | tee -a "$SUMMARY"
  mkdir -p /tmp/deepinfer-bundle && tar -xJf build-cuda/gpu-bundle.tar.xz -C /tmp/deepinfer-bundle
  BIN=/tmp/deepinfer-bundle/bin
  export LD_LIBRARY_PATH=/tmp/deepinfer-bundle/lib:${LD_LIBRARY_PATH:-}
  # The test binary looks for tests/data at the path it was built with.
  DATA_DIR=$(cat /tmp/deepinfer-bundle/source_dir)
  if [ ! -e "$DATA_DIR" ]; then mkdir -p "$(dirname "$DATA_DIR")" && ln -s "$PWD" "$DATA_DIR"; fi
  # The bundle's commit, not this copy's git metadata, which may be older than the carried tree.
  if [ -f /tmp/deepinfer-bundle/source_commit ]; then note "bundle built from $(cat /tmp/deepinfer-bundle/source_commit)"; fi
else
  note "build: FAILED and no bundle (tail of build.log):"
  tail -30 "$OUT/build.log" | tee -a "$SUMMARY"
  exit 1
fi

# 2. Tests.
# One process per test suite: a kernel fault poisons its CUDA context, and must not fail every
# suite after it.
: > "$OUT/test_cuda.log"
TEST_RC=0
for suite in $("$BIN/test_cuda" --gtest_list_tests | grep -v '^ ' | tr -d '.'); do
  timeout 300 "$BIN/test_cuda" --gtest_color=no --gtest_filter="$suite.*" >> "$OUT/test_cuda.log" 2>&1 || TEST_RC=1
done
note "test_cuda: exit $TEST_RC after $(elapsed) s; $(grep -c '^\[       OK \]' "$OUT/test_cuda.log") passed, $(grep -c '^\[  FAILED  \].*ms)' "$OUT/test_cuda.log") failed"
grep -E '^\[  FAILED  \].*ms\)|\[bf16 (vs f32|decode vs prefill)\]' "$OUT/test_cuda.log" | tee -a "$SUMMARY"
grep -B3 -A12 -m5 'Failure' "$OUT/test_cuda.log" | head -80 > "$OUT/test_failures.txt"

# 2b. Expert parallelism on the one GPU: two ranks sharing it (the staged host exchange; NCCL
# refuses two ranks on one GPU) must give one rank's logits byte for byte on every MoE fixture.
EP_RC=0
for fixture in deepseek_v2 deepseek_v3 qwen3_moe mixtral gpt_oss; do
  ep_score=("$BIN/deepinfer" score --device cuda --model "tests/data/$fixture" --tokens 1,5,9,22,7,3,100,42,17,250,64,2
            --batch-invariant)
  if ! timeout 120 "${ep_score[@]}" --dump-logits "$OUT/ep_one.f32" > "$OUT/ep_one.txt" 2>> "$OUT/ep.log" ||
     ! timeout 120 "${ep_score[@]}" --data-parallel-size 2 --expert-parallel --dump-logits "$OUT/ep_two.f32" \
         > "$OUT/ep_two.txt" 2>> "$OUT/ep.log" ||
     ! cmp -s "$OUT/ep_one.f32" "$OUT/ep_two.f32"; then
    note "expert parallel: $fixture FAILED (ep.log)"
    EP_RC=1
  fi
done
note "expert parallel (2 ranks sharing the GPU, host exchange): exit $EP_RC"

# 3. Benchmarks.
if [ "$BENCH" = 1 ]; then
  MODELS=/tmp/deepinfer-bench-models
  : > "$OUT/bench.jsonl"
  for name in llama3-8b qwen3-8b; do
    if [ "$(elapsed)" -gt 420 ]; then note "bench $name: skipped (time budget)"; continue; fi
    rm -rf "$MODELS" && mkdir -p "$MODELS"
    "$BIN/deepinfer-make-random-model" --config "bench/configs/$name.json" --out "$MODELS/$name" --dtype bf16 \
      >> "$OUT/bench.log" 2>&1 || { note "bench $name: model generation failed"; continue; }
    PREFILL=4096
    if [ "$name" = llama3-8b ] || [ "$LONG" = 1 ]; then PREFILL=4096,32768; fi
    echo "== $name" >> "$OUT/bench.log"
    timeout 200 "$BIN/deepinfer" bench --device cuda --model "$MODELS/$name" --batches 1,8,64,256 \
      --contexts 1024,8192 --prefill "$PREFILL" --steps 8 --engine-batches 0 2>> "$OUT/bench.log" |
      sed "s/^{/{\"config\":\"$name\",/" | tee -a "$OUT/bench.jsonl" >> "$OUT/bench.log"
    note "bench $name: exit ${PIPESTATUS[0]} at $(elapsed) s"
    if [ "$name" = llama3-8b ]; then
      # The same decode points op by op, for the CUDA graphs' gain in the same run.
      timeout 100 "$BIN/deepinfer" bench --device cuda --model "$MODELS/$name" --batches 1,8,64,256 \
        --contexts 1024 --prefill 128 --steps 8 --no-cuda-graphs --no-products --engine-batches 0 2>> "$OUT/bench.log" | grep '"decode"' |
        sed "s/^{/{\"config\":\"$name-eager\",/" | tee -a "$OUT/bench.jsonl" >> "$OUT/bench.log"
      # The b=1 decode fusion's gain: the same points with the unfused op sequence.
      timeout 100 "$BIN/deepinfer" bench --device cuda --model "$MODELS/$name" --batches 1,8 \
        --contexts 1024 --prefill 128 --steps 8 --no-fused-decode --no-products --engine-batches 0 2>> "$OUT/bench.log" | grep '"decode"' |
        sed "s/^{/{\"config\":\"$name-unfused\",/" | tee -a "$OUT/bench.jsonl" >> "$OUT/bench.log"
      # And with every logits row copied back and sampled on the host, for the device sampler's gain.
      timeout 100 "$BIN/deepinfer" bench --device cuda --model "$MODELS/$name" --batches 1,8,64,256 \
        --contexts 1024 --prefill 128 --steps 8 --host-sampling --no-products --engine-batches 0 2>> "$OUT/bench.log" | grep '"decode"' |
        sed "s/^{/{\"config\":\"$name-host-sampling\",/" | tee -a "$OUT/bench.jsonl" >> "$OUT/bench.log"
    fi
    rm -rf "$MODELS"
  done
  python3 tools/gpu/summarize_bench.py "$OUT/bench.jsonl" | tee -a "$SUMMARY"
fi
note "total: $(elapsed) s"
exit $TEST_RC
