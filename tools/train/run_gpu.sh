#!/usr/bin/env bash
# Runs train.py on the GPU machine and packs its output into $OUT within the device tool's limits
# (at most 8 files of < 16 MiB): the safetensors shards, one tarball of the small files, the log.
# Usage (repository root): bash tools/train/run_gpu.sh [--smoke] [--minutes M] [--seed S]
set -uo pipefail
out_dir=/tmp/deepinfer-tiny-v3
rm -rf "$out_dir"
PYTHONUNBUFFERED=1 python3 tools/train/train.py --out "$out_dir" "$@" 2>&1 | tee "$OUT/train.log"
rc=${PIPESTATUS[0]}
cp "$out_dir"/model-*.safetensors "$OUT"/ 2>/dev/null
tar -C "$out_dir" --exclude='model-*.safetensors' -czf "$OUT/model_files.tar.gz" .
ls -l "$out_dir" "$OUT"
exit "$rc"
