#!/usr/bin/env bash
# Runs one tokenizer fuzzer for DEEPINFER_FUZZ_SECONDS (default 10) from a fresh corpus directory.
# Usage: tests/fuzz/run_fuzzer.sh BUILD/fuzz/fuzz_encode   (DEEPINFER_FUZZ_SECONDS=600 for a long run)
set -euo pipefail
fuzzer="$1"
seconds="${DEEPINFER_FUZZ_SECONDS:-10}"
corpus="$(mktemp -d)"
trap 'rm -rf "$corpus"' EXIT
"$fuzzer" -max_total_time="$seconds" -max_len=4096 -timeout=30 -rss_limit_mb=4096 -print_final_stats=1 "$corpus"
