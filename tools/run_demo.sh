#!/usr/bin/env bash
# `make run`: until the HTTP server lands, runs a greedy generate demo on a tiny model the
# project generated (tests/data/qwen3, made by tools/reference/make_fixtures.py).
set -euo pipefail
cli="${1:-build/bin/deepinfer}"
model="$(dirname "$0")/../tests/data/qwen3"
echo "deepinfer demo: greedy continuation of 8 token ids on the tiny random Qwen3 in $model"
echo "+ $cli generate --model $model --tokens 1,2,3,4,5,6,7,8 --max-tokens 16"
"$cli" generate --model "$model" --tokens 1,2,3,4,5,6,7,8 --max-tokens 16
echo
echo "Point it at any Hugging Face model directory (config.json + *.safetensors):"
echo "  $cli generate --model /path/to/Qwen3-0.6B --tokens 9707,11,1879 --max-tokens 32"
