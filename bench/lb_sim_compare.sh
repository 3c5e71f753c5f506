#!/usr/bin/env bash
# The load-balancing policy comparison of docs/cluster.md: `deepinfer lb-sim` on the Mooncake
# conversation and synthetic traces at 8, 64 and 512 prefill instances (half as many decode
# instances), with the arrival rate scaled in proportion to the instances so each instance sees
# the same load; plus, at 64 instances, the conversation trace above capacity and without the
# shared KV store. Prints the tables and
# appends one JSON line per run to OUT.jsonl.
# Usage: bench/lb_sim_compare.sh DEEPINFER TRACES_DIR OUT.jsonl
#   TRACES_DIR holds conversation_trace.jsonl and synthetic_trace.jsonl (Mooncake FAST'25 release)
set -euo pipefail

usage="usage: bench/lb_sim_compare.sh DEEPINFER TRACES_DIR OUT.jsonl"
deepinfer="${1:?$usage}"
traces="${2:?$usage}"
out="${3:?$usage}"
run_json="$(mktemp)"
trap 'rm -f "$run_json"' EXIT

# run TRACE_NAME INSTANCES RATE_SCALE [MORE FLAGS]
run() {
  local name="$1" instances="$2" rate="$3"
  shift 3
  echo
  "$deepinfer" lb-sim --trace "$traces/${name}_trace.jsonl" --prefill-instances "$instances" --rate-scale "$rate" \
    --json "$run_json" "$@"
  cat "$run_json" >> "$out"
}

# Load per instance: the conversation trace at x40 and the synthetic one at x45 keep 64 instances
# busy without overloading them (docs/cluster.md).
for instances in 8 64 512; do
  run conversation "$instances" "$(awk "BEGIN { print $instances * 40 / 64 }")"
  run synthetic "$instances" "$(awk "BEGIN { print $instances * 45 / 64 }")"
done
run conversation 64 50
run conversation 64 40 --shared-store off
