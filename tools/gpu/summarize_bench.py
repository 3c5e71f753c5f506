#!/usr/bin/env python3
# tools/gpu/summarize_bench.py FILE.jsonl: one line per record of `deepinfer bench --device cuda`'s
# JSON output (each record tagged with a "config" by the calling script), for the GPU scripts'
# summaries (check.sh, bench_fp8.sh).
import json, sys
for line in open(sys.argv[1]):
    try:
        r = json.loads(line)
    except ValueError:
        continue
    k = r["kind"]
    if k == "peaks":
        print(f'{r["config"]}: copy {r["copy_tb_s"]:.2f} TB/s, read-only stream {r["read_tb_s"]:.2f} TB/s, bf16 GEMM {r["bf16_matmul_tflop_s"]:.0f} TFLOP/s, weights {r["weight_gb_per_step"]:.2f} GB')
    elif k == "decode":
        print(f'{r["config"]} decode b={r["batch"]:>3} ctx={r["context"]:>5}: {r["tok_s"]:>9.1f} tok/s  step {r["step_ms"]:.2f} ms  {r["achieved_tb_s"]:.2f} TB/s = {100*r["bandwidth_fraction"]:.1f}% of copy, {100*r["read_fraction"]:.1f}% of read{"  (shared KV pages)" if r["shared_kv"] else ""}{"  [graphs]" if r.get("cuda_graphs") else "  [eager]"}  [{r.get("sampler", "no")} sampling]')
    elif k == "decode_attention":
        print(f'{r["config"]} decode attention b={r["batch"]} ctx={r["context"]} {r.get("kv_dtype", "")}: {r["us"]:.1f} us, {r["effective_tb_s"]:.2f} TB/s effective{"  (shared KV pages)" if r.get("shared_kv") else ""}')
    elif k == "prefill_attention":
        print(f'{r["config"]} prefill attention alone {r["tokens"]}: {r["ms"]:.2f} ms per layer ({r.get("all_layers_ms", float("nan")):.0f} ms all layers), {r["tflop_s"]:.0f} TFLOP/s = {100*r["matmul_fraction"]:.1f}% of GEMM')
    elif k == "decode_product":
        print(f'{r["config"]} product {r["name"]:>9} {r["n"]}x{r["k"]} M={r["rows"]}: {r["us"]:.1f} us, {r["tb_s"]:.2f} TB/s = {100*r["copy_fraction"]:.1f}% of copy, {100*r["read_fraction"]:.1f}% of read')
    elif k == "fp8_product":
        print(f'{r["config"]} FP8 product {r["name"]:>9} {r["n"]}x{r["k"]} M={r["rows"]}: FP8 {r["fp8_us"]:.1f} us ({r["fp8_tflop_s"]:.0f} TFLOP/s = {100*r["bf16_gemm_fraction"]:.0f}% of the bf16 GEMM, {100*r["fp8_peak_fraction"]:.0f}% of FP8 peak, weights {r["fp8_weight_tb_s"]:.2f} TB/s), bf16 {r["bf16_us"]:.1f} us: {r["speedup"]:.2f}x')
    elif k == "expert_products":
        print(f'{r["config"]} experts {r["weights"]} tokens={r["tokens"]:>3} ({r["experts_read"]} read): {r["us"]:.1f} us, {r["tb_s"]:.2f} TB/s = {100*r["copy_fraction"]:.1f}% of copy')
    elif k == "sampling":
        print(f'{r["config"]} sampling b={r["batch"]:>3} vocab={r["vocab"]} {r["filters"]}: {r["us"]:.1f} us')
    elif k == "prefill":
        print(f'{r["config"]} prefill {r["tokens"]}: {r["tok_s"]:.0f} tok/s, {r["tflop_s"]:.0f} TFLOP/s = {100*r["matmul_fraction"]:.1f}% of GEMM (attention {100*r["attention_flop_share"]:.0f}% of FLOPs)')
