#!/usr/bin/env bash
# tools/gpu/profile_decode.sh: which kernels a decode step launches on the H200 and how long each
# takes. Profiles `deepinfer bench --device cuda` decode at batch 1 and 64 (BATCHES), ctx 1024, on a
# random model of CONFIG (default bench/configs/llama3-8b.json) in DTYPE (default bf16; fp8, mxfp4: see
# deepinfer-make-random-model). MIN_KERNELS (default 50): the fewest kernels a graph's replay needs to be
# printed (kernel_timeline.py --min-kernels; a one-layer model's step has about 20). With Nsight Systems (nsys):
# per-kernel summaries go to $OUT/profile_b<batch>.csv. Without it: the CUPTI trace library (bench/kernel_trace.cpp) records
# every kernel and tools/gpu/kernel_timeline.py prints one decode step kernel by kernel with the
# gaps between them ($OUT/timeline_b<batch>.txt). The top of each goes to stdout and profile.txt.
# Usage, from the repository root (after tools/gpu/check.sh, or alone: it unpacks the bundle as
# check.sh does): OUT=<dir> tools/gpu/profile_decode.sh
set -uo pipefail
OUT=${OUT:-/tmp/deepinfer-gpu-profile}
mkdir -p "$OUT"
REPORT="$OUT/profile.txt"
: > "$REPORT"
note() { echo "$*" | tee -a "$REPORT"; }

NSYS=$(command -v nsys || ls /usr/local/cuda/bin/nsys /opt/nvidia/nsight-systems/*/bin/nsys 2>/dev/null | head -1)
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
"$BIN/deepinfer-make-random-model" --config "${CONFIG:-bench/configs/llama3-8b.json}" --out "$MODEL" --dtype "${DTYPE:-bf16}" \
  > "$OUT/make_model.log" 2>&1 || { note "profile_decode: model generation failed (make_model.log)"; exit 1; }
if [ -z "$NSYS" ]; then
  TRACE_LIB=$(ls "$BIN"/libdeepinfer-kernel-trace.so 2>/dev/null | head -1)
  if [ -z "$TRACE_LIB" ]; then note "profile_decode: neither nsys nor libdeepinfer-kernel-trace.so; nothing profiled"; exit 0; fi
  note "profile_decode: nsys not found; kernel timeline from CUPTI ($TRACE_LIB)"
  for batch in ${BATCHES:-1 64}; do
    CUDA_INJECTION64_PATH="$TRACE_LIB" DEEPINFER_KERNEL_TRACE_OUT="$OUT/trace_b$batch.csv" timeout 240 \
      "$BIN/deepinfer" bench --device cuda --model "$MODEL" --batches "$batch" --contexts 1024 --prefill 128 \
      --steps 8 --no-products > "$OUT/trace_b$batch.log" 2>&1
    note "== batch $batch, ctx 1024: $(grep '"decode"' "$OUT/trace_b$batch.log" | head -1)"
    python3 tools/gpu/kernel_timeline.py "$OUT/trace_b$batch.csv" --min-kernels "${MIN_KERNELS:-50}" > "$OUT/timeline_b$batch.txt" 2>&1
    head -4 "$OUT/timeline_b$batch.txt" | tee -a "$REPORT"
  done
  rm -rf "$MODEL"
  exit 0
fi
note "nsys: $("$NSYS" --version 2>&1 | head -1)"
for batch in ${BATCHES:-1 64}; do
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
