#!/usr/bin/env bash
# tools/gpu/bench_async.sh: issue 21's measurement on the H200, the synchronous against the
# pipelined step loop (--async-scheduling) on the same batch: `deepinfer generate` of BATCH
# prompts (default 64) x TOKENS sampled tokens (default 256, ignore_eos, a seed each) on the
# default model and on a random Llama-3-8B-shaped bf16 model (LAYERS layers, default 8), wall time
# of each run, whether the outputs are identical, and from a CUPTI kernel trace of each run the
# device's idle time between consecutive decode-graph replays (tools/gpu/kernel_timeline.py).
# Uses the bundle tools/gpu/pack.sh made. Output: $OUT/async_bench.txt and the timelines.
set -uo pipefail
OUT=${OUT:-/tmp/deepinfer-async-bench}
BATCH=${BATCH:-64}
TOKENS=${TOKENS:-256}
LAYERS=${LAYERS:-8}
mkdir -p "$OUT" /tmp/deepinfer-bundle
REPORT="$OUT/async_bench.txt"
: > "$REPORT"
note() { echo "$*" | tee -a "$REPORT"; }
[ -x /tmp/deepinfer-bundle/bin/deepinfer ] || tar -xJf build-cuda/gpu-bundle.tar.xz -C /tmp/deepinfer-bundle
export LD_LIBRARY_PATH=/tmp/deepinfer-bundle/lib:${LD_LIBRARY_PATH:-}
BIN=/tmp/deepinfer-bundle/bin
python3 - "$BATCH" "$TOKENS" > "$OUT/prompts.jsonl" <<'PY'
import json, sys
for i in range(int(sys.argv[1])):
    print(json.dumps({"prompt": f"Request {i}: write a long story about a lighthouse keeper.",
                      "max_tokens": int(sys.argv[2]), "ignore_eos": True, "temperature": 0.8, "seed": i}))
PY
python3 - bench/configs/llama3-8b.json /tmp/async-llama.json "$LAYERS" <<'PY'
import json, sys
config = json.load(open(sys.argv[1])); config["num_hidden_layers"] = int(sys.argv[3])
json.dump(config, open(sys.argv[2], "w"))
PY
"$BIN/deepinfer-make-random-model" --config /tmp/async-llama.json --out /tmp/async-llama --dtype bf16 \
  > "$OUT/make_model.log" 2>&1 || note "bench_async: model generation failed (make_model.log)"
for model in models/default /tmp/async-llama; do
  name=$(basename "$model")
  for mode in sync async; do
    flag=""
    [ "$mode" = async ] && flag=--async-scheduling
    start=$(date +%s%N)
    timeout 200 "$BIN/deepinfer" generate --device cuda --model "$model" --input "$OUT/prompts.jsonl" \
      --output "$OUT/$name-$mode.jsonl" --max-num-seqs "$BATCH" $flag > "$OUT/$name-$mode.log" 2>&1
    rc=$?
    ms=$((($(date +%s%N) - start) / 1000000))
    note "$name $mode: rc $rc, ${ms} ms wall (loading included), $((BATCH * TOKENS)) tokens"
    CUDA_INJECTION64_PATH="$BIN/libdeepinfer-kernel-trace.so" DEEPINFER_KERNEL_TRACE_OUT="$OUT/trace.csv" timeout 200 \
      "$BIN/deepinfer" generate --device cuda --model "$model" --input "$OUT/prompts.jsonl" \
      --output /dev/null --max-num-seqs "$BATCH" $flag > /dev/null 2>&1
    python3 tools/gpu/kernel_timeline.py "$OUT/trace.csv" > "$OUT/timeline-$name-$mode.txt" 2>&1
    grep -h "^== graph\|^between" "$OUT/timeline-$name-$mode.txt" | tee -a "$REPORT"
    rm -f "$OUT/trace.csv"
  done
  if cmp -s "$OUT/$name-sync.jsonl" "$OUT/$name-async.jsonl"; then
    note "$name: identical outputs"
  else
    note "$name: outputs differ (expected only where kernels are not batch-invariant: a pipelined step carries finished sequences' rows)"
  fi
done
rm -rf /tmp/async-llama
