#!/usr/bin/env bash
# `make run`: starts `deepinfer serve --ui` on 127.0.0.1:${PORT:-8000} and prints the playground's
# URL and example requests.
# It serves the default model (`serve` without --model: models/default, the embedded
# deepinfer-tiny-v3); without it, a tiny random Qwen3-shaped model with the real Qwen3
# tokenizer, written once into the build directory (gibberish text, every API working).
set -euo pipefail
cli="${1:-build/bin/deepinfer}"
root="$(cd "$(dirname "$0")/.." && pwd)"
build="$(cd "$(dirname "$cli")/.." && pwd)"
port="${PORT:-8000}"
model_flags=()
name="$(basename "$(readlink -f "$root/models/default")")"
if [[ ! -d "$root/models/default" ]]; then
  model="$build/demo-models/qwen3-tiny"
  cmake -DMAKE_MODEL="$build/bin/deepinfer-make-random-model" -DSOURCE_DIR="$root" -DOUT="$model" \
    -P "$root/tests/server/make_server_model.cmake"
  name=qwen3-tiny
  model_flags=(--model "$model" --served-model-name "$name")
fi
cd "$root"
cat <<MSG
deepinfer demo server on http://127.0.0.1:$port (Ctrl-C stops it).
Open the playground in a browser: http://127.0.0.1:$port/
Or try, from another shell:
  curl http://127.0.0.1:$port/v1/models
  curl http://127.0.0.1:$port/v1/chat/completions -H 'Content-Type: application/json' \\
    -d '{"model": "$name", "messages": [{"role": "user", "content": "Hello!"}], "max_tokens": 16, "stream": true}'
  curl http://127.0.0.1:$port/v1/messages -H 'Content-Type: application/json' -H 'anthropic-version: 2023-06-01' \\
    -d '{"model": "$name", "max_tokens": 16, "messages": [{"role": "user", "content": "Hello!"}]}'
Or point the official OpenAI SDK at base_url http://127.0.0.1:$port/v1 (any api_key), and the
Anthropic SDK at base_url http://127.0.0.1:$port. Metrics: curl http://127.0.0.1:$port/metrics
MSG
exec "$cli" serve "${model_flags[@]}" --port "$port" --ui
