#!/usr/bin/env bash
# tools/gpu/bench_vision.sh: the image encoder on the GPU beside transformers' on the same weights
# (issue 28). Writes a random bf16 Qwen2.5-VL with Qwen2.5-VL-7B's vision tower (32 blocks of width
# 1280, 16 heads, windows of 112 pixels, full attention on blocks 7/15/23/31, the merger into 3584)
# and a one-layer text model, with the published preprocessor bounds (3136 to 12845056 pixels).
# For each image size in SIZES (default "448x448 1024x1024 1920x1080") it times the tower and merger
# for one image of random pixels: `deepinfer bench images` (10 runs after 2 warm-ups, each until its
# rows are in host memory), then transformers' model.visual on the same grid in the same process
# layout (its default attention, sdpa; pixels moved to the GPU and the rows back inside the timed
# span, as the engine's are), median of the same 10 runs after 2 warm-ups. Uses the bundle
# tools/gpu/pack.sh made. Output: $OUT/vision_bench.jsonl (one line per size), $OUT/vision_bench.log.
set -uo pipefail
OUT=${OUT:-/tmp/deepinfer-vision-bench}
SIZES=${SIZES:-"448x448 1024x1024 1920x1080"}
RUNS=${RUNS:-10}
mkdir -p "$OUT" /tmp/deepinfer-bundle
JSON="$OUT/vision_bench.jsonl"
LOG="$OUT/vision_bench.log"
: > "$JSON"
: > "$LOG"
[ -x /tmp/deepinfer-bundle/bin/deepinfer ] || tar -xJf build-cuda/gpu-bundle.tar.xz -C /tmp/deepinfer-bundle
export LD_LIBRARY_PATH=/tmp/deepinfer-bundle/lib:${LD_LIBRARY_PATH:-}
BIN=/tmp/deepinfer-bundle/bin
MODEL=/tmp/qwen2_5_vl_7b_vision
python3 - "$MODEL" >> "$LOG" 2>&1 <<'PY' || { echo "writing the checkpoint failed (see $LOG)"; exit 1; }
import json, os, sys, torch, transformers
out = sys.argv[1]
text = dict(hidden_size=3584, intermediate_size=128, num_hidden_layers=1, num_attention_heads=28,
            num_key_value_heads=4, vocab_size=1024, max_position_embeddings=32768,
            rope_parameters={"rope_type": "default", "rope_theta": 1000000.0, "mrope_section": [16, 24, 24]})
vision = dict(depth=32, hidden_size=1280, intermediate_size=3420, num_heads=16, in_channels=3, patch_size=14,
              spatial_merge_size=2, temporal_patch_size=2, window_size=112, fullatt_block_indexes=[7, 15, 23, 31],
              out_hidden_size=3584, hidden_act="silu")
config = transformers.Qwen2_5_VLConfig(text_config=text, vision_config=vision, image_token_id=1000,
                                       vision_start_token_id=1001, vision_end_token_id=1002, video_token_id=1003)
torch.manual_seed(0)
model = transformers.Qwen2_5_VLForConditionalGeneration._from_config(config, dtype=torch.bfloat16)
with torch.no_grad():
    for p in model.parameters():
        p.normal_(0.0, 0.02)
model.save_pretrained(out)
json.dump({"min_pixels": 3136, "max_pixels": 12845056, "patch_size": 14, "merge_size": 2, "temporal_patch_size": 2},
          open(os.path.join(out, "preprocessor_config.json"), "w"))
print("wrote", out, "transformers", transformers.__version__)
PY
for size in $SIZES; do
  width=${size%x*}
  height=${size#*x}
  "$BIN/deepinfer" bench images --model "$MODEL" --device cuda --width "$width" --height "$height" --runs "$RUNS" \
    > "$OUT/ours_$size.json" 2>> "$LOG" || { echo "deepinfer bench images failed at $size (see $LOG)"; continue; }
done
python3 - "$MODEL" "$OUT" "$RUNS" "$SIZES" >> "$JSON" 2>> "$LOG" <<'PY'
import json, os, statistics, sys, time, torch, transformers
model_dir, out, runs, sizes = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4].split()
model = transformers.Qwen2_5_VLForConditionalGeneration.from_pretrained(model_dir, dtype=torch.bfloat16).cuda().eval()
visual = model.model.visual
gpu = torch.cuda.get_device_name()
for size in sizes:
    path = os.path.join(out, f"ours_{size}.json")
    if not os.path.exists(path):
        continue
    ours = json.load(open(path))
    grid = torch.tensor([ours["grid"]], device="cuda")
    # float32, as Qwen2VLImageProcessor gives them and the engine uploads them.
    pixels = torch.randn(ours["patches"], 3 * 2 * 14 * 14, dtype=torch.float32)
    times = []
    with torch.no_grad():
        for i in range(2 + runs):
            torch.cuda.synchronize()
            start = time.perf_counter()
            result = visual(pixels.cuda(), grid_thw=grid)
            rows = result if torch.is_tensor(result) else result.pooler_output if hasattr(result, "pooler_output") else result[0]
            rows = rows.float().cpu()
            torch.cuda.synchronize()
            if i >= 2:
                times.append((time.perf_counter() - start) * 1000.0)
    peer = statistics.median(times)
    print(json.dumps({"gpu": gpu, "size": size, "grid": ours["grid"], "patches": ours["patches"],
                      "tokens": ours["tokens"], "runs": runs, "deepinfer_median_ms": ours["median_ms"],
                      "transformers_median_ms": peer, "transformers_runs_ms": times,
                      "deepinfer_runs_ms": ours["runs_ms"], "transformers_attention": visual.config._attn_implementation,
                      "transformers_version": transformers.__version__, "transformers_rows": list(rows.shape),
                      "speedup_vs_transformers": peer / ours["median_ms"]}))
PY
cat "$JSON"
