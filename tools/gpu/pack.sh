#!/usr/bin/env bash
# tools/gpu/pack.sh: builds the GPU binaries here (build-cuda) and packs them with the shared
# libraries they need beyond glibc/libstdc++ into build-cuda/gpu-bundle.tar.xz, for a GPU machine
# that lacks the host libraries (oneDNN, ICU, PCRE2, simdjson, ...). Carry that file to the GPU
# machine; tools/gpu/check.sh uses it when it cannot build there.
set -euo pipefail
cd "$(dirname "$0")/../.."
cmake -S . -B build-cuda -G Ninja -DCMAKE_BUILD_TYPE=Release -DDEEPINFER_CUDA=ON > /dev/null
nice cmake --build build-cuda --target test_cuda deepinfer deepinfer-make-random-model -j2
STAGE=$(mktemp -d)
mkdir -p "$STAGE/bin" "$STAGE/lib"
cp build-cuda/bin/test_cuda build-cuda/bin/deepinfer build-cuda/bin/deepinfer-make-random-model "$STAGE/bin/"
for binary in "$STAGE"/bin/*; do
  ldd "$binary" | awk '$3 ~ /^\// {print $3}'
done | sort -u | grep -vE '/(libc|libm|libdl|libpthread|librt|libgcc_s|libstdc\+\+|ld-linux[^/]*|libcublas|libcublasLt)\.so' |
  while read -r lib; do cp -L "$lib" "$STAGE/lib/"; done
echo "$PWD" > "$STAGE/source_dir"
tar -cJf build-cuda/gpu-bundle.tar.xz -C "$STAGE" .
rm -rf "$STAGE"
ls -la build-cuda/gpu-bundle.tar.xz
