#!/usr/bin/env bash
# Installs every Debian package deepinfer needs to build, test and benchmark; idempotent
# (installs only what is missing), and the pinned npm test oracles. Usage: tools/install_deps.sh
set -euo pipefail

# Installed with --no-install-recommends, so a package another one only recommends is listed here:
# libdnnl-dev's CMake config requires OpenCL (ocl-icd-opencl-dev); curl runs the README's examples;
# the Python module (python/) needs python3-dev and pybind11-dev, its tests python3-pytest, and
# `pip install .` python3-setuptools, python3-pip and python3-wheel (python3-venv for a venv).
# The playground's browser test drives Debian's chromium (headless) through npm puppeteer-core; its
# screenshot needs a font (fonts-dejavu-core). The image decoders link libjpeg-turbo, libpng, libwebp and
# giflib; Pillow and numpy (python3-pil, python3-numpy) generate their oracle fixtures
# (tools/reference/make_image_fixtures.py).
packages=(
  build-essential cmake ninja-build pkg-config git ca-certificates curl
  libgtest-dev libgmock-dev libbenchmark-dev
  libdnnl-dev ocl-icd-opencl-dev nlohmann-json3-dev libpcre2-dev libsimdjson-dev libicu-dev libssl-dev
  clang-14 libclang-rt-14-dev ccache
  libjpeg62-turbo-dev libpng-dev libwebp-dev libgif-dev python3-pil python3-numpy
  libboost1.81-dev libhiredis-dev libxxhash-dev redis-server libgloo-dev
  nodejs npm chromium fonts-dejavu-core
  python3-dev pybind11-dev python3-pytest python3-setuptools python3-pip python3-wheel python3-venv
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# A machine that already has Node.js from elsewhere needs no Debian nodejs/npm.
if command -v node >/dev/null && command -v npm >/dev/null; then
  filtered=()
  for p in "${missing[@]}"; do [[ "$p" == nodejs || "$p" == npm ]] || filtered+=("$p"); done
  missing=("${filtered[@]+"${filtered[@]}"}")
fi
if ((${#missing[@]})); then
  echo "deps: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}"
else
  echo "deps: all Debian packages present"
fi

# npm packages, each folder pinned by its lock file: the tests' oracles (tokenizers, chat
# templates, API clients, the browser driver) in tests/node; Vega and Vega-Lite for the benchmark
# charts in tools/plots.
for npm_dir in "$(dirname "$0")/../tests/node" "$(dirname "$0")/plots"; do
  name="$(basename "$(dirname "$npm_dir")")/$(basename "$npm_dir")"
  if [[ ! -f "$npm_dir/node_modules/.package-lock.json" || "$npm_dir/package-lock.json" -nt "$npm_dir/node_modules/.package-lock.json" ]]; then
    echo "deps: installing the npm packages of $name"
    (cd "$npm_dir" && npm ci --no-audit --no-fund --loglevel=error)
  else
    echo "deps: npm packages of $name present"
  fi
done
