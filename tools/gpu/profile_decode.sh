#!/usr/bin/env bash
# tools/gpu/profile_decode.sh: which kernels a decode step launches on the H200 and how long each
# takes, from Nsight Systems (nsys) when the machine has it; otherwise it says so and exits 0.
# Profiles `deepinfer bench --device cuda` decode at batch 1 and 64, ctx 1024, on a random
# Llama-3-8B-shaped bf16 model; per-kernel summaries (name, instances, total/mean time) go to
# $OUT/profile_b<batch>.csv, the top of each to stdout and $OUT/profile.txt.
# Usage, from the repository root (after tools/gpu/check.sh, or alone: it unpacks the bundle as
# check.sh does): OUT=<dir> tools/gpu/profile_decode.sh
set -uo pipefail
OUT=${OUT:-/tmp/deepinfer-gpu-profile}
mkdir -p "$OUT"
REPORT="$OUT/profile.txt"
: > "$REPORT"
note() { echo "$*" | tee -a "$REPORT"; }

NSYS=$(command -v nsys || ls /usr/local/cuda/bin/nsys /opt/nvidia/nsight-systems/*/bin/nsys 2>/dev/null | head -1)
if [ -z "$NSYS" ]; then
  note "profile_decode: nsys not found (PATH, /usr/local/cuda/bin, /opt/nvidia); nothing profiled. ncu: $(command -v ncu || echo absent)"
  exit 0
fi
BIN=${BIN:-}
if [ -z "$BIN" ]; then
  if [ -x build-gpu/bin/deepinfer ]; then
    BIN=build-gpu/bin
  else
    if [ ! -x /tmp/deepinfer-bundle/bin/deepinfer ]; then
      mkdir -p /tmp/deepinfer-bundle && tar -xJf build-cuda/gpu-bundle.tar.xz -C /tmp/deepinfer-bundle || exit 1
    fi
    BIN=/tmp/deepinfer-bundle/bin
    export LD_LIBRARY_PATH=/tmp/deepinfer-bundle/lib:${LD_LIBRARY_PATH:-}
  fi
fi
MODEL=/tmp/deepinfer-profile-model
rm -rf "$MODEL"
"$BIN/deepinfer-make-random-model" --config bench/configs/llama3-8b.json --out "$MODEL" --dtype bf16 \
  > "$OUT/make_model.log" 2>&1 || { note "profile_decode: model generation failed (make_model.log)"; exit 1; }
note "nsys: $("$NSYS" --version 2>&1 | head -1)"
for batch in 1 64; do
  # Graph replays traced node by node, so each kernel of the step is listed.
  run_nsys() {
    timeout 240 "$NSYS" profile --trace=cuda --sample=none --cpuctxsw=none --force-overwrite=true "$@" \
      -o "$OUT/decode_b$batch" "$BIN/deepinfer" bench --device cuda --model "$MODEL" --batches "$batch" \
      --contexts 1024 --prefill 128 --steps 8 --no-products > "$OUT/nsys_b$batch.log" 2>&1
  }
  run_nsys --cuda-graph-trace=node || run_nsys
  "$NSYS" stats --report cuda_gpu_kern_sum --format csv --output "$OUT/profile_b$batch" \
    "$OUT/decode_b$batch.nsys-rep" >> "$OUT/nsys_b$batch.log" 2>&1
  CSV=$(ls "$OUT"/profile_b${batch}*.csv 2>/dev/null | head -1)
  note "== batch $batch, ctx 1024: kernels by total time (whole bench run: prefill, warm-up and timed steps)"
  if [ -n "$CSV" ]; then head -30 "$CSV" | cut -c1-220 | tee -a "$REPORT"; else note "(no summary; see nsys_b$batch.log)"; fi
done
rm -rf "$MODEL"
