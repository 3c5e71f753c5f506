#!/usr/bin/env bash
# tools/gpu/llama_compare.sh: deepinfer against llama.cpp on the GPU machine, same random weights,
# one run. `cpu`: batch-1 decode and 128-token prefill of the Qwen3-0.6B shape on the host CPU at
# several thread counts (issue 2; `make bench` does the same on the development VM). `cuda`: the
# Llama-3-8B shape on the H200 (CUDA_CONFIG: another bench/configs name, e.g. qwen3-30b-a3b for
# issue 20; CUDA_LAYERS cuts it to that many layers; GGUF_DIR=/dev/shm for a full-depth one whose
# GGUF would not fit the disk beside its checkpoint), deepinfer bench --device cuda next to
# llama-bench and llama-batched-bench built with CUDA (issue 6). llama.cpp gets its best settings:
# an f16 GGUF of the same weights (deepinfer reads the bf16 checkpoint; bf16 weights of this
# magnitude are exact in f16) and a prompt-sized micro-batch for prefill.
# Needs build-cuda/gpu-bundle.tar.xz (tools/gpu/pack.sh) and build-cuda/llama-src.tar.xz (the
# llama.cpp source node-llama-cpp ships, trimmed; tools/gpu/pack.sh writes it when `make bench` has installed bench/node). Output in $OUT.
# Usage, from the repository root: [CPU_CONFIGS="qwen3-0.6b qwen3-8b"] [PROFILE=1] tools/gpu/llama_compare.sh cpu|cuda
# [--build-only] [THREADS...] (CPU_CONFIGS: bench/configs names, default qwen3-0.6b).
# llama.cpp is built in build-llama/ (ignored by git, so it stays on a warm machine between calls):
# when the two archives do not fit one call's upload, a first call with only llama-src.tar.xz and
# --build-only builds it, and a second with only the bundle runs the benchmarks.
set -uo pipefail
OUT=${OUT:-/tmp/deepinfer-llama-compare}
MODE=${1:?usage: llama_compare.sh cpu|cuda [--build-only] [THREADS...]}
shift
BUILD_ONLY=0
if [ "${1:-}" = --build-only ]; then BUILD_ONLY=1; shift; fi
THREADS=("$@")
[ ${#THREADS[@]} -eq 0 ] && THREADS=(4 8 16)
LLAMA=$PWD/build-llama
mkdir -p "$OUT" /tmp/deepinfer-bundle "$LLAMA/src"
START=$(date +%s)
note() { echo "$*" | tee -a "$OUT/summary_$MODE.txt"; }
elapsed() { echo $(( $(date +%s) - START )); }

if [ -f build-cuda/llama-src.tar.xz ] && [ ! -f "$LLAMA/src/CMakeLists.txt" ]; then
  tar -xJf build-cuda/llama-src.tar.xz -C "$LLAMA/src"
  # Only the benchmark tools: the trimmed source leaves the others out.
  printf 'find_package(Threads REQUIRED)\nllama_add_compile_flags()\nadd_subdirectory(llama-bench)\nadd_subdirectory(batched-bench)\n' \
    > "$LLAMA/src/tools/CMakeLists.txt"
fi
note "== llama_compare $MODE $(date -u +%FT%TZ); host: $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cpus"

build_llama() {  # build_llama DIR extra-cmake-flags... (once per machine)
  local dir=$1
  shift
  [ -x "$dir/bin/llama-batched-bench" ] && return 0
  cmake -S "$LLAMA/src" -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=Release -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF \
    -DBUILD_SHARED_LIBS=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF \
    -DLLAMA_BUILD_APP=OFF "$@" > "$OUT/llama_cmake_$MODE.log" 2>&1 &&
    cmake --build "$dir" --target llama-bench llama-batched-bench -j "$(nproc)" > "$OUT/llama_build_$MODE.log" 2>&1
}

export LD_LIBRARY_PATH=/tmp/deepinfer-bundle/lib:${LD_LIBRARY_PATH:-}
bin=/tmp/deepinfer-bundle/bin
make_pair() {  # make_pair CONFIG DIR GGUF [GGUF_DTYPE]: a random bf16 checkpoint and its GGUF twin,
  # its matrices in GGUF_DTYPE (default bf16; f16 holds the same values)
  "$bin/deepinfer-make-random-model" --config "$1" --out "$2" --dtype bf16 > /dev/null &&
    "$bin/deepinfer-hf-to-gguf" --model "$2" --out "$3" --dtype "${4:-bf16}" > /dev/null
}

if [ "$MODE" = cpu ]; then
  build_llama "$LLAMA/cpu" -DGGML_NATIVE=ON || { note "llama.cpp CPU build failed"; tail -20 "$OUT/llama_build_$MODE.log"; exit 1; }
  note "llama.cpp CPU build: $(elapsed) s"
  [ "$BUILD_ONLY" = 1 ] && exit 0
  tar -xJf build-cuda/gpu-bundle.tar.xz -C /tmp/deepinfer-bundle
  for config in ${CPU_CONFIGS:-qwen3-0.6b}; do
    model=/tmp/$config
    make_pair "bench/configs/$config.json" "$model" "$model.gguf" || { note "$config: model generation failed"; continue; }
    for t in "${THREADS[@]}"; do
      OMP_NUM_THREADS=$t "$bin/deepinfer" bench --model "$model" --prompt-tokens 128 --decode-tokens 32 --repeats 3 \
        --threads "$t" | tail -n 1 > "$OUT/deepinfer_${config}_t$t.json"
      "$LLAMA/cpu/bin/llama-bench" -m "$model.gguf" -p 128 -n 32 -t "$t" -r 3 -o json > "$OUT/llama_${config}_t$t.json"
      # llama-bench's tg32 starts from an empty cache, deepinfer's decode follows its 128-token
      # prompt: the same 32 steps at depth 128 too, for a like-for-like decode ratio.
      "$LLAMA/cpu/bin/llama-bench" -m "$model.gguf" -p 0 -n 32 -d 128 -t "$t" -r 3 -o json \
        > "$OUT/llama_${config}_t${t}_d128.json"
      # PROFILE=1: a separate run whose stderr has each op's time per decode step (bench --profile).
      [ "${PROFILE:-0}" = 1 ] && OMP_NUM_THREADS=$t "$bin/deepinfer" bench --model "$model" --prompt-tokens 128 \
        --decode-tokens 32 --repeats 2 --threads "$t" --profile > /dev/null 2> "$OUT/profile_${config}_t$t.txt"
      python3 - "$OUT/deepinfer_${config}_t$t.json" "$OUT/llama_${config}_t$t.json" "$config, threads $t" \
        "$OUT/llama_${config}_t${t}_d128.json" <<'PY' | tee -a "$OUT/summary_$MODE.txt"
import json, sys
d = json.load(open(sys.argv[1]))
runs = json.load(open(sys.argv[2]))
best = lambda r: max(r["samples_ts"])
prefill = next(best(r) for r in runs if r["n_gen"] == 0)
decode = next(best(r) for r in runs if r["n_prompt"] == 0)
bw = d["memory_read_gb_s"]
llama_frac = decode * d["weight_bytes_per_token"] / 1e9 / bw
print(f'{sys.argv[3]}: memory read {bw:.1f} GB/s | prefill tok/s deepinfer {d["prefill_tok_s"]:.1f} '
      f'llama.cpp {prefill:.1f} ({d["prefill_tok_s"]/prefill:.2f}x) | decode tok/s deepinfer {d["decode_tok_s"]:.2f} '
      f'llama.cpp {decode:.2f} ({d["decode_tok_s"]/decode:.2f}x) | decode/bandwidth deepinfer '
      f'{100*d["decode_bandwidth_ratio"]:.1f}% llama.cpp {100*llama_frac:.1f}%')
try:
    deep = max(best(r) for r in json.load(open(sys.argv[4])) if r["n_prompt"] == 0)
    print(f'  decode at depth 128 (both after 128 cached tokens): llama.cpp {deep:.2f} tok/s, '
          f'deepinfer / llama.cpp {d["decode_tok_s"]/deep:.2f}x')
except (OSError, ValueError, StopIteration):
    print('  (no llama-bench -d 128 result)')
PY
    done
    rm -rf "$model" "$model.gguf"
  done
else
  build_llama "$LLAMA/cuda" -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90a -DGGML_NATIVE=OFF ||
    { note "llama.cpp CUDA build failed"; tail -20 "$OUT/llama_build_$MODE.log"; exit 1; }
  note "llama.cpp CUDA build: $(elapsed) s"
  [ "$BUILD_ONLY" = 1 ] && exit 0
  tar -xJf build-cuda/gpu-bundle.tar.xz -C /tmp/deepinfer-bundle
  config=${CUDA_CONFIG:-llama3-8b}
  model=/tmp/$config
  python3 - "bench/configs/$config.json" "$model.json" "${CUDA_LAYERS:-}" <<'PY'
import json, sys
config = json.load(open(sys.argv[1]))
if sys.argv[3]:
    config["num_hidden_layers"] = int(sys.argv[3])
json.dump(config, open(sys.argv[2], "w"))
PY
  # GGUF_DIR=/dev/shm keeps the GGUF in memory: a full-depth Qwen3-30B-A3B (61 GB) and its twin do
  # not both fit the disk.
  gguf=${GGUF_DIR:-/tmp}/$config.gguf
  make_pair "$model.json" "$model" "$gguf" f16 || { note "model generation failed"; exit 1; }
  note "models written ($config${CUDA_LAYERS:+, $CUDA_LAYERS layers}): $(elapsed) s"
  timeout 300 "$bin/deepinfer" bench --device cuda --model "$model" --batches 1,8,64,256 --contexts 1024 --prefill 4096 \
    --steps 8 --engine-batches 0 > "$OUT/deepinfer_cuda.jsonl" 2>> "$OUT/deepinfer_cuda.log"
  "$LLAMA/cuda/bin/"llama-bench -m "$gguf" -ngl 99 -fa 1 -p 4096 -b 4096 -ub 4096 -n 128 -r 2 -o json \
    > "$OUT/llama_cuda_bench.json" 2> "$OUT/llama_cuda_bench.log"
  "$LLAMA/cuda/bin/"llama-batched-bench -m "$gguf" -ngl 99 -fa 1 -c 280000 -b 2048 -ub 512 -npp 1024 -ntg 32 \
    -npl 1,8,64,256 > "$OUT/llama_batched.txt" 2>&1
  python3 - "$OUT/deepinfer_cuda.jsonl" "$OUT/llama_cuda_bench.json" "$OUT/llama_batched.txt" <<'PY' | tee -a "$OUT/summary_$MODE.txt"
import json, re, sys
ours = {}
for line in open(sys.argv[1]):
    try:
        r = json.loads(line)
    except ValueError:
        continue
    if r["kind"] == "decode" and r["context"] == 1024:
        ours[("decode", r["batch"])] = r["tok_s"]
    if r["kind"] == "prefill":
        ours[("prefill", r["tokens"])] = r["tok_s"]
runs = json.load(open(sys.argv[2]))
for r in runs:
    if r["n_gen"] == 0:
        print(f'prefill 4096: deepinfer {ours.get(("prefill", 4096), 0):.0f} tok/s, llama.cpp {r["avg_ts"]:.0f} tok/s')
    if r["n_prompt"] == 0:
        print(f'llama-bench decode b=1 (empty context): llama.cpp {r["avg_ts"]:.1f} tok/s')
# llama-batched-bench table rows: |  PP |  TG |  B | N_KV | T_PP s | S_PP t/s | T_TG s | S_TG t/s | T s | S t/s |
for line in open(sys.argv[3]):
    cells = [c.strip() for c in line.strip().strip("|").split("|")]
    if len(cells) >= 8 and cells[0].isdigit():
        batch = int(cells[2])
        tg = float(cells[7])
        mine = ours.get(("decode", batch))
        ratio = f"{mine / tg:.2f}x" if mine else "n/a"
        print(f'decode b={batch} ctx~1024: deepinfer {mine or 0:.1f} tok/s, llama.cpp {tg:.1f} tok/s -> {ratio}')
PY
fi
note "total: $(elapsed) s"
