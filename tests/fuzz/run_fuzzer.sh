#!/usr/bin/env bash
# Runs one fuzzer for DEEPINFER_FUZZ_SECONDS (default 10), starting from its committed seeds in
# tests/fuzz/corpus/<fuzzer name>/ when there are any (new inputs go to a scratch directory, so the
# seeds stay as committed), with an optional libFuzzer dictionary.
# Usage: tests/fuzz/run_fuzzer.sh BUILD/fuzz/fuzz_encode [DICT]   (DEEPINFER_FUZZ_SECONDS=600 for a long run)
set -euo pipefail
fuzzer="$1"
seconds="${DEEPINFER_FUZZ_SECONDS:-10}"
scratch="$(mktemp -d)"
trap 'rm -rf "$scratch"' EXIT
args=(-max_total_time="$seconds" -max_len=4096 -timeout=30 -rss_limit_mb=4096 -print_final_stats=1)
[[ $# -ge 2 ]] && args+=(-dict="$2")
corpora=("$scratch")
seeds="$(dirname "$0")/corpus/$(basename "$fuzzer")"
[[ -d "$seeds" ]] && corpora+=("$seeds")
"$fuzzer" "${args[@]}" "${corpora[@]}"
