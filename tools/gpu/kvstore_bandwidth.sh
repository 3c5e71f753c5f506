#!/usr/bin/env bash
# tools/gpu/kvstore_bandwidth.sh: the KV store's load bandwidth into GPU memory (docs/benchmarks.md,
# "Load bandwidth per tier"): host tier -> device through the pinned slab pool (direct DMA) and
# through ordinary memory (staged), next to raw cudaMemcpy H2D from pinned and pageable memory,
# plus the host/disk/Redis tiers. Run after tools/gpu/check.sh: uses the binary of its bundle
# (/tmp/deepinfer-bundle, from tools/gpu/pack.sh) or of build-gpu, building it there if needed.
# Output: $OUT/kvstore_bandwidth.txt.
set -uo pipefail
OUT=${OUT:-/tmp/deepinfer-gpu-check}
mkdir -p "$OUT"
BENCH=/tmp/deepinfer-bundle/bin/deepinfer-bench-kvstore-bandwidth
if [ -x "$BENCH" ]; then
  export LD_LIBRARY_PATH=/tmp/deepinfer-bundle/lib:${LD_LIBRARY_PATH:-}
else
  BUILD_DIR=build-gpu
  BENCH="$BUILD_DIR/bin/deepinfer-bench-kvstore-bandwidth"
  { cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90a \
      -DDEEPINFER_CUDA=ON -DBUILD_TESTING=ON -DDEEPINFER_BENCH=ON &&
    cmake --build "$BUILD_DIR" --target deepinfer-bench-kvstore-bandwidth -j16; } > "$OUT/kvstore_bandwidth_build.log" 2>&1 ||
    { echo "no bundled bench binary and the build failed; tail:"; tail -20 "$OUT/kvstore_bandwidth_build.log"; exit 1; }
fi
for run in "64 2 64" "64 2 1" "256 0.5 64"; do
  set -- $run
  echo "== $1 pages of $2 MiB, $3 copies per page" | tee -a "$OUT/kvstore_bandwidth.txt"
  timeout 120 "$BENCH" --device cuda --pages "$1" --page-mib "$2" --copies-per-page "$3" --dir /tmp/dikv-bench-bandwidth 2>&1 |
    tee -a "$OUT/kvstore_bandwidth.txt"
done
