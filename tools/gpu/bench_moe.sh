#!/usr/bin/env bash
# tools/gpu/bench_moe.sh: MoE decode/prefill on the H200 for the Qwen3-30B-A3B, DeepSeek-V2-Lite and
# GPT-OSS-20B shapes, cut to LAYERS layers (default 8) so the random checkpoints fit the machine's disk;
# the roofline fraction counts the bytes actually read per step (active experts only), so depth
# does not change it. MODELS picks some of the three (default all). Uses the bundle tools/gpu/pack.sh
# made. BATCHES, CONTEXTS and PREFILL: the decode batches, contexts and prompt lengths (default
# 1,8,64,256, 1024 and 4096; issue 20 also asks for 8192 and 32768).
# TIMELINE=1 also traces a batch-1 decode step of each model kernel by kernel on the same checkpoint
# (bench/kernel_trace.cpp, tools/gpu/kernel_timeline.py), as profile_decode.sh does for one config.
# SKEW=SHARE (e.g. 0.5): skewed routers (deepinfer-make-random-model --router-skew; the Qwen3 and
# DeepSeek-V2 shapes get topk_method noaux_tc with one group so their choice takes a bias), each line
# tagged "-skew<SHARE>"; the prefill lines' busiest_tenth_expert_share says what each run saw.
# DTYPES: the checkpoints' weight formats, each model once per entry (default bf16; fp8: the
# projections and experts in e4m3 with 128 x 128 block scales, as DeepSeek-V3 publishes them; lines
# of formats other than bf16 tagged "-<dtype>").
# Output: $OUT/moe_bench.jsonl, and with TIMELINE=1 $OUT/timeline_<model>.txt.
set -uo pipefail
OUT=${OUT:-/tmp/deepinfer-moe-bench}
LAYERS=${LAYERS:-8}
MODELS=${MODELS:-qwen3-30b-a3b deepseek-v2-lite gpt-oss-20b}
CONTEXTS=${CONTEXTS:-1024}
PREFILL=${PREFILL:-4096}
SKEW=${SKEW:-}
BATCHES=${BATCHES:-1,8,64,256}
DTYPES=${DTYPES:-bf16}
mkdir -p "$OUT" /tmp/deepinfer-bundle /tmp/moe-models
tar -xJf build-cuda/gpu-bundle.tar.xz -C /tmp/deepinfer-bundle
export LD_LIBRARY_PATH=/tmp/deepinfer-bundle/lib:${LD_LIBRARY_PATH:-}
bin=/tmp/deepinfer-bundle/bin
for name in $MODELS; do
  python3 - "bench/configs/$name.json" "/tmp/moe-models/$name.json" "$LAYERS" "$SKEW" <<'PY'
import json, sys
config = json.load(open(sys.argv[1]))
layers = int(sys.argv[3])
if sys.argv[4] and config["model_type"] != "gpt_oss" and config.get("topk_method") != "noaux_tc":
    config.update(topk_method="noaux_tc", n_group=1, topk_group=1)
config["num_hidden_layers"] = layers
if "layer_types" in config:
    config["layer_types"] = config["layer_types"][:layers]
if "mlp_only_layers" in config:
    config["mlp_only_layers"] = [i for i in config["mlp_only_layers"] if i < layers]
json.dump(config, open(sys.argv[2], "w"))
PY
  for dtype in ${DTYPES//,/ }; do
    suffix=$([ "$dtype" = bf16 ] || echo "-$dtype")
    tag="$name-${LAYERS}l${SKEW:+-skew$SKEW}$suffix"
    "$bin/deepinfer-make-random-model" --config "/tmp/moe-models/$name.json" --out "/tmp/moe-models/$name" --dtype "$dtype" \
      ${SKEW:+--router-skew "$SKEW"} >> "$OUT/moe_bench.log" 2>&1 || { echo "$name ($dtype): model generation failed"; continue; }
    timeout 240 "$bin/deepinfer" bench --device cuda --model "/tmp/moe-models/$name" --batches "$BATCHES" --contexts "$CONTEXTS" \
      --prefill "$PREFILL" --steps 4 --engine-batches 0 2>> "$OUT/moe_bench.log" | sed "s/^{/{\"config\":\"$tag\",/" | tee -a "$OUT/moe_bench.jsonl"
    if [ "${TIMELINE:-0}" = 1 ]; then
      CUDA_INJECTION64_PATH="$bin/libdeepinfer-kernel-trace.so" DEEPINFER_KERNEL_TRACE_OUT=/tmp/moe-trace.csv timeout 240 \
        "$bin/deepinfer" bench --device cuda --model "/tmp/moe-models/$name" --batches 1 --contexts "${CONTEXTS%%,*}" \
        --prefill 128 --steps 8 --no-products --engine-batches 0 > /dev/null 2>> "$OUT/moe_bench.log"
      python3 tools/gpu/kernel_timeline.py /tmp/moe-trace.csv > "$OUT/timeline_$name$suffix.txt" 2>&1
      rm -f /tmp/moe-trace.csv
    fi
    rm -rf "/tmp/moe-models/$name"
  done
done
