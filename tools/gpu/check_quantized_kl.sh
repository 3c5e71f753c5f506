#!/usr/bin/env bash
# tools/gpu/check_quantized_kl.sh: how far the packed kernels move a quantised model's predictions
# from its own dequantisation (issue 27's KL check), with `deepinfer score --kl-reference`:
#   fp8    the Llama-3-8B shape with FP8 projections against itself loaded dequantised (bf16 on CUDA);
#   mxfp4  GPT-OSS-20B's shape with MXFP4 experts, the same way;
#   kv     the Llama-3-8B shape in bf16 with an fp8 KV cache against a bf16 cache, over KV_TOKENS.
# Random weights (deepinfer-make-random-model) on random token ids: such models' next-token
# distributions are nearly flat, so each summary's reference_entropy_mean (ln(vocab) when flat) is
# what its KL reads against. score runs the prompt path (chunks of 512 tokens; FP8 activations
# quantised per 128 columns), not decode steps.
# Output: $OUT/kl.jsonl (each run's summary line with its "check"), kl.log, summary_kl.txt.
# Usage, from the repository root on the GPU machine, with the binaries check.sh uses:
#   [TOKENS=1024] [KV_TOKENS=8192] [CHECKS="fp8 mxfp4 kv"] tools/gpu/check_quantized_kl.sh BIN_DIR
# DEVICE (default cuda) and DENSE_CONFIG / MOE_CONFIG (the two shapes' configs) try it elsewhere;
# MODEL_DIR (default /tmp/deepinfer-kl-model) puts the generated checkpoint elsewhere (/dev/shm).
set -uo pipefail
BIN=${1:?usage: tools/gpu/check_quantized_kl.sh BIN_DIR}
OUT=${OUT:-/tmp/deepinfer-gpu-check}
MODEL=${MODEL_DIR:-/tmp/deepinfer-kl-model}
mkdir -p "$OUT"
SUMMARY="$OUT/summary_kl.txt"
: > "$SUMMARY"
: > "$OUT/kl.jsonl"
trap 'rm -rf "$MODEL"' EXIT

# random_ids COUNT CONFIG: COUNT ids below the config's vocabulary, the same on every run.
random_ids() {
  python3 -c "
import json, random, sys
vocab = json.load(open(sys.argv[2]))['vocab_size']
rng = random.Random(0)
print(','.join(str(rng.randrange(vocab)) for _ in range(int(sys.argv[1]))))" "$1" "$2"
}

# check NAME CONFIG DTYPE TOKENS FLAGS...: score the model against the reference FLAGS describe.
check() {
  local name=$1 config=$2 dtype=$3 count=$4
  shift 4
  rm -rf "$MODEL"
  "$BIN/deepinfer-make-random-model" --config "$config" --out "$MODEL" --dtype "$dtype" >> "$OUT/kl.log" 2>&1 ||
    { echo "$name: model generation failed (kl.log)" | tee -a "$SUMMARY"; return; }
  timeout 600 "$BIN/deepinfer" score --device "${DEVICE:-cuda}" --model "$MODEL" --tokens "$(random_ids "$count" "$config")" \
    --top-logprobs 1 --kl-reference "$MODEL" "$@" 2>> "$OUT/kl.log" | grep '"summary":"kl"' |
    sed "s/^{/{\"check\":\"$name\",\"tokens\":$count,/" | tee -a "$OUT/kl.jsonl" >> "$SUMMARY"
  echo "$name: exit ${PIPESTATUS[0]}" >> "$OUT/kl.log"
}

DENSE=${DENSE_CONFIG:-bench/configs/llama3-8b.json}
MOE=${MOE_CONFIG:-bench/configs/gpt-oss-20b.json}
for part in ${CHECKS:-fp8 mxfp4 kv}; do
  case "$part" in
    fp8) check fp8-vs-dequantised "$DENSE" fp8 "${TOKENS:-1024}" --kl-reference-dequantized ;;
    mxfp4) check mxfp4-vs-dequantised "$MOE" mxfp4 "${TOKENS:-1024}" --kl-reference-dequantized ;;
    kv) check fp8-kv-vs-bf16-kv "$DENSE" bf16 "${KV_TOKENS:-8192}" --kv-cache-dtype fp8 --kl-reference-kv-cache-dtype bfloat16 ;;
    *) echo "unknown check '$part' (fp8, mxfp4, kv)" | tee -a "$SUMMARY" ;;
  esac
done
cat "$SUMMARY"
