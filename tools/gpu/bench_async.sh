#!/usr/bin/env bash
# tools/gpu/bench_async.sh: issue 21's measurement on the H200, the synchronous against the
# pipelined step loop on the default model and on a random Llama-3-8B-shaped bf16 model (LAYERS
# layers, default 8). Tokens/s: `deepinfer bench --device cuda`'s engine_loop lines (both loops side
# by side in one process, median of 3 runs, at each BATCHES size, default 1 64 256, TOKENS sampled
# tokens per request, default 128). Through the offline API: for each batch and loop, one
# `deepinfer generate` of the same shape (its generation tokens/s, loading left out), then one
# under a CUPTI trace for the device's idle time between consecutive decode-graph replays and the
# device-to-host copies per step (tools/gpu/kernel_timeline.py), and whether both loops' outputs
# are identical. Uses the bundle tools/gpu/pack.sh made.
# Output: $OUT/async_bench.txt, $OUT/async_bench.jsonl, the timelines.
set -uo pipefail
OUT=${OUT:-/tmp/deepinfer-async-bench}
BATCHES=${BATCHES:-"1 64 256"}
TOKENS=${TOKENS:-128}
LAYERS=${LAYERS:-8}
mkdir -p "$OUT" /tmp/deepinfer-bundle
REPORT="$OUT/async_bench.txt"
JSON="$OUT/async_bench.jsonl"
: > "$REPORT"
: > "$JSON"
note() { echo "$*" | tee -a "$REPORT"; }
[ -x /tmp/deepinfer-bundle/bin/deepinfer ] || tar -xJf build-cuda/gpu-bundle.tar.xz -C /tmp/deepinfer-bundle
export LD_LIBRARY_PATH=/tmp/deepinfer-bundle/lib:${LD_LIBRARY_PATH:-}
BIN=/tmp/deepinfer-bundle/bin
python3 - bench/configs/llama3-8b.json /tmp/async-llama.json "$LAYERS" <<'PY'
import json, sys
config = json.load(open(sys.argv[1])); config["num_hidden_layers"] = int(sys.argv[3])
json.dump(config, open(sys.argv[2], "w"))
PY
"$BIN/deepinfer-make-random-model" --config /tmp/async-llama.json --out /tmp/async-llama --dtype bf16 \
  > "$OUT/make_model.log" 2>&1 || note "bench_async: model generation failed (make_model.log)"
loop_flag() { [ "$1" = sync ] && echo --no-async-scheduling || echo --async-scheduling; }
for model in models/default /tmp/async-llama; do
  name=$(basename "$model")
  timeout 300 "$BIN/deepinfer" bench --device cuda --model "$model" --batches 1 --contexts 1024 --prefill 128 \
    --steps 2 --no-products --engine-batches "$(echo $BATCHES | tr ' ' ,)" --engine-tokens "$TOKENS" \
    2>> "$OUT/bench.log" | grep '"engine_loop"' | sed "s/^{/{\"model\":\"$name\",/" | tee -a "$JSON" >> "$REPORT"
  for batch in $BATCHES; do
    python3 - "$batch" "$TOKENS" > "$OUT/prompts.jsonl" <<'PY'
import json, random, sys
random.seed(7)
for i in range(int(sys.argv[1])):
    print(json.dumps({"prompt_token_ids": [random.randrange(100, 1000) for _ in range(32)],
                      "max_tokens": int(sys.argv[2]), "ignore_eos": True, "temperature": 0.8, "seed": i}))
PY
    for mode in sync async; do
      timeout 300 "$BIN/deepinfer" generate --device cuda --model "$model" --input "$OUT/prompts.jsonl" \
        --output /dev/null --max-num-seqs "$batch" "$(loop_flag $mode)" > "$OUT/$name-b$batch-$mode-untraced.log" 2>&1
      CUDA_INJECTION64_PATH="$BIN/libdeepinfer-kernel-trace.so" DEEPINFER_KERNEL_TRACE_OUT="$OUT/trace.csv" timeout 300 \
        "$BIN/deepinfer" generate --device cuda --model "$model" --input "$OUT/prompts.jsonl" \
        --output "$OUT/$name-b$batch-$mode.jsonl" --max-num-seqs "$batch" "$(loop_flag $mode)" \
        > "$OUT/$name-b$batch-$mode.log" 2>&1 || note "$name b$batch $mode: generate failed ($name-b$batch-$mode.log)"
      python3 tools/gpu/kernel_timeline.py "$OUT/trace.csv" --min-kernels 10 > "$OUT/timeline-$name-b$batch-$mode.txt" 2>&1
      rm -f "$OUT/trace.csv"
    done
    identical=false
    cmp -s "$OUT/$name-b$batch-sync.jsonl" "$OUT/$name-b$batch-async.jsonl" && identical=true
    python3 - "$name" "$batch" "$identical" "$OUT/timeline-$name-b$batch-sync.txt" \
      "$OUT/timeline-$name-b$batch-async.txt" "$OUT/$name-b$batch-sync-untraced.log" \
      "$OUT/$name-b$batch-async-untraced.log" <<'PY' | tee -a "$JSON" >> "$REPORT"
import json, re, sys
name, batch, identical, sync_timeline, async_timeline, sync_log, async_log = sys.argv[1:8]
def rate(path):
    # The generation progress line's tokens/s (loading left out).
    found = re.findall(r"([\d.]+) tok/s", open(path).read())
    return float(found[-1]) if found else None
def timeline(path):
    # The most replayed graph: the decode steps of the whole batch.
    best = None
    for line in open(path):
        m = re.match(r"between consecutive replays \((\d+) steps\): median step ([\d.]+) us, median idle ([\d.]+) us, "
                     r"busy ([\d.]+) %, median device-to-host copies (\d+)", line)
        if m and (best is None or int(m.group(1)) > best["steps"]):
            best = {"steps": int(m.group(1)), "median_step_us": float(m.group(2)), "median_idle_us": float(m.group(3)),
                    "busy_pct": float(m.group(4)), "device_to_host_copies_per_step": int(m.group(5))}
    return best
line = {"kind": "generate", "model": name, "batch": int(batch), "identical_outputs": identical == "true",
        "sync_tok_s": rate(sync_log), "async_tok_s": rate(async_log),
        "sync": timeline(sync_timeline), "async": timeline(async_timeline)}
if line["sync_tok_s"] and line["async_tok_s"]:
    line["async_over_sync"] = round(line["async_tok_s"] / line["sync_tok_s"], 3)
print(json.dumps(line))
PY
  done
done
cat "$REPORT"
rm -rf /tmp/async-llama
