#!/usr/bin/env python3
"""DeepSeek-V3 decode under expert parallelism (DP attention = EP experts): a projection.

Per-GPU output tokens/s at EP 8/16/32/64 for a per-GPU batch B and a mean context C, from
per-kernel rates measured on one H200 (docs/benchmarks.md, the sections named in RATES) and a
communication model whose link figures are parameters, not measurements. Issue 23, item 5;
the write-up is docs/benchmarks.md, "Expert parallelism: DeepSeek-V3 decode projection".
No measurement of a DeepSeek-V3-shaped layer went into it.

Per step and GPU (B sequences, each with C keys of latent cache):
  every layer:   MLA projections (weights read once per micro-batch) + the latent cache
                 (B x C x 1152 bytes) + small kernels (a fixed time per layer);
  3 dense layers: the 18432-wide MLP; 58 MoE layers: router, shared expert, and the routed
                 experts of the GPU: S = 256/EP + redundant slots, all of them read, B x 8 rows
                 on average over the GPU's slots, the busiest GPU EPLB_IMBALANCE times that
                 (applied to the whole expert time and to its link traffic);
  then the output head. A product's time is max(bytes / bandwidth, flops / tensor rate).
Communication per MoE layer and micro-batch: dispatch (FP8 rows + per-128 scales) and combine
(bf16 rows), one row per (token, expert) slot as DeepEP's low-latency kernels and the engine's
host path send them; slots on the own GPU stay, slots on the own node go over NVLink, the rest
over the NIC (the two links in parallel), plus a fixed latency per all-to-all.
Bounds: no overlap = compute(B) + comm(B); full overlap = two micro-batches of B/2 (DeepSeek's
scheme): max(compute(B/2) x 2, comm of both), which reads every weight twice.

Usage: /usr/bin/python3 tools/ep_projection.py [--format table|jsonl] [--ep 8,16,32,64]
         [--batch 64,128,256] [--context 4096] [--links h200|h800] [--weight-bytes 2]
Python 3 standard library only.
"""
import argparse
import json
import sys

GB = 1e9
GIB = 2**30

# DeepSeek-V3 (config.json of deepseek-ai/DeepSeek-V3); MTP module left out.
MODEL = {
    "layers": 61, "dense_layers": 3, "moe_layers": 58, "hidden": 7168, "heads": 128,
    "q_lora_rank": 1536, "kv_lora_rank": 512, "rope_dim": 64, "nope_dim": 128, "v_dim": 128,
    "dense_intermediate": 18432, "moe_intermediate": 2048, "routed_experts": 256,
    "shared_experts": 1, "top_k": 8, "vocab": 129280, "latent_bytes_per_token_layer": 1152,
}

# Measured on the H200 (docs/benchmarks.md). TB/s and TFLOP/s.
RATES = {
    "engine_2026_12_02": {
        "about": "kernels in the engine's decode path as of 2026-12-02",
        "mla_tb_s": 0.57,  # V3 layout (128 heads) decode attention kernel, b=64 x 8K, run 2
        "expert_tb_s": 2.9,  # grouped expert GEMV, run 6 timeline: 75 MB (gate|up 3.2 + down 2.5 TB/s) in 26 us
        "expert_tflop_s": 92.0,  # WMMA grouped kernel (graphs, > 4 rows/expert): run 4 trace, 425 GFLOP in 4.6 ms
        "dense_tb_s": 3.34,  # cuBLASLt products at 64 rows, 2026-11-30 kernel timeline (Llama-3-8B b=64)
        "dense_tflop_s": 521.0,  # 67.4 % of 773: dense prefill 4K, check run 2026-12-02
    },
    "engine_2026_12_03": {
        "about": "with the 64-heads-a-block MLA kernel and the experts on the grouped GEMM's rate",
        "mla_tb_s": 2.19,  # 64 heads a block (wgmma), b=64 x 8K, 2026-12-03
        "expert_tb_s": 2.9,
        "expert_tflop_s": 300.0,  # cuBLAS grouped GEMM, run 5 / grouped_gemm_probe: 279-320 TFLOP/s
        "dense_tb_s": 3.34,
        "dense_tflop_s": 521.0,
    },
    "ceilings": {
        "about": "measured H200 ceilings for every product: read stream and bf16 GEMM",
        "mla_tb_s": None,  # max(bytes / read, useful flops / GEMM rate)
        "expert_tb_s": 4.46, "expert_tflop_s": 773.0,
        "dense_tb_s": 4.46, "dense_tflop_s": 773.0,
    },
}
CEILINGS = {"read_tb_s": 4.46, "copy_tb_s": 4.21, "bf16_gemm_tflop_s": 773.0}

# Parameters, not measured here.
LINKS = {
    "h200": {"nvlink_gb_s": 450.0, "nic_gb_s": 50.0},  # NVLink 4 per direction; 400 Gb/s NIC per GPU
    "h800": {"nvlink_gb_s": 160.0, "nic_gb_s": 50.0},  # DeepEP's usable H800 NVLink figure
}
PARAMS = {
    "gpus_per_node": 8,
    "redundant_slots_per_gpu": 1,
    "eplb_imbalance": 1.05,  # busiest rank / mean, stationary traces, 1 redundant per rank (EPLB section)
    "all_to_all_latency_us": 30.0,  # per dispatch or combine, of the 20-50 us range
    "small_kernels_us_per_layer": 15.0,  # router, norms, grouping, combine: run 6 timeline at b=1 (14.7 us)
    "dispatch_bytes_per_value": 1.0,  # FP8 dispatch, plus one float32 scale per 128 values
    "combine_bytes_per_value": 2.0,  # bf16 combine
    "hbm_gib": 139.0,  # the lent H200's memory
    "reserve_gib": 8.0,  # activations, workspaces, graphs, communication buffers (assumed)
}


def weights(weight_bytes):
    """Parameter counts and bytes of one GPU's share."""
    m = MODEL
    h, heads = m["hidden"], m["heads"]
    attn = (h * m["q_lora_rank"]  # q_a
            + m["q_lora_rank"] * heads * (m["nope_dim"] + m["rope_dim"])  # q_b
            + h * (m["kv_lora_rank"] + m["rope_dim"])  # kv_a (with the rope key)
            + m["kv_lora_rank"] * heads * (m["nope_dim"] + m["v_dim"])  # kv_b = W_UK, W_UV
            + heads * m["v_dim"] * h)  # o
    return {
        "attn_params": attn,
        "dense_mlp_params": 3 * h * m["dense_intermediate"],
        "expert_params": 3 * h * m["moe_intermediate"],
        "router_params": m["routed_experts"] * h,
        "head_params": m["vocab"] * h,
        "bytes": weight_bytes,
    }


def product_ms(params, rows, bytes_per_param, tb_s, tflop_s):
    return max(params * bytes_per_param / (tb_s * 1e12), 2.0 * rows * params / (tflop_s * 1e12)) * 1e3


def compute_ms(b, ep, context, rates, w):
    """One forward of b rows on one GPU, in ms, by part."""
    m, p = MODEL, PARAMS
    wb = w["bytes"]
    slots = m["routed_experts"] // ep + p["redundant_slots_per_gpu"]
    proj = m["layers"] * product_ms(w["attn_params"], b, wb, rates["dense_tb_s"], rates["dense_tflop_s"])
    kv_bytes = b * context * m["latent_bytes_per_token_layer"]
    if rates["mla_tb_s"] is None:
        flops = b * context * 2 * m["heads"] * (m["kv_lora_rank"] + m["rope_dim"] + m["kv_lora_rank"])
        core_layer = max(kv_bytes / (CEILINGS["read_tb_s"] * 1e12), flops / (CEILINGS["bf16_gemm_tflop_s"] * 1e12))
    else:
        core_layer = kv_bytes / (rates["mla_tb_s"] * 1e12)
    core = m["layers"] * core_layer * 1e3
    small = m["layers"] * p["small_kernels_us_per_layer"] / 1e3
    dense = m["dense_layers"] * product_ms(w["dense_mlp_params"], b, wb, rates["dense_tb_s"], rates["dense_tflop_s"])
    shared = m["moe_layers"] * (
        product_ms(w["expert_params"] * m["shared_experts"], b, wb, rates["dense_tb_s"], rates["dense_tflop_s"])
        + product_ms(w["router_params"], b, 2, rates["dense_tb_s"], rates["dense_tflop_s"]))
    rows = b * m["top_k"]  # this GPU's share of all GPUs' routed rows
    routed_layer = max(slots * w["expert_params"] * wb / (rates["expert_tb_s"] * 1e12),
                       2.0 * rows * w["expert_params"] / (rates["expert_tflop_s"] * 1e12))
    routed = m["moe_layers"] * p["eplb_imbalance"] * routed_layer * 1e3
    head = product_ms(w["head_params"], b, wb, rates["dense_tb_s"], rates["dense_tflop_s"])
    parts = {"mla_projections_ms": proj, "mla_attention_ms": core, "small_kernels_ms": small,
             "dense_mlp_ms": dense, "shared_expert_router_ms": shared, "routed_experts_ms": routed,
             "lm_head_ms": head}
    parts["total_ms"] = sum(parts.values())
    return parts


def comm_ms(b, ep, links, microbatches):
    """Dispatch + combine of all MoE layers for b rows split into micro-batches, in ms."""
    m, p = MODEL, PARAMS
    node = min(ep, p["gpus_per_node"])
    on_node = (node - 1) / ep  # slots on another GPU of this node
    off_node = (ep - node) / ep  # slots on other nodes
    h = m["hidden"]
    dispatch_row = h * p["dispatch_bytes_per_value"]
    if p["dispatch_bytes_per_value"] == 1:
        dispatch_row += (h // 128) * 4  # FP8: a float32 scale per 128 values
    combine_row = h * p["combine_bytes_per_value"]
    slots = b * m["top_k"] * p["eplb_imbalance"]
    per_layer = 0.0
    for row in (dispatch_row, combine_row):
        link_s = max(slots * on_node * row / (links["nvlink_gb_s"] * GB),
                     slots * off_node * row / (links["nic_gb_s"] * GB))
        per_layer += link_s * 1e3 + microbatches * p["all_to_all_latency_us"] / 1e3
    return m["moe_layers"] * per_layer, on_node, off_node


def memory_gib(b, ep, context, w):
    m, p = MODEL, PARAMS
    slots = m["routed_experts"] // ep + p["redundant_slots_per_gpu"]
    replicated = (m["layers"] * w["attn_params"] + m["dense_layers"] * w["dense_mlp_params"]
                  + m["moe_layers"] * (w["expert_params"] * m["shared_experts"] + w["router_params"])
                  + 2 * w["head_params"])  # embedding and output head
    weight_bytes = (replicated + m["moe_layers"] * slots * w["expert_params"]) * w["bytes"]
    kv = b * context * m["latent_bytes_per_token_layer"] * m["layers"]
    return weight_bytes / GIB, kv / GIB


def project(ep, b, context, rates_name, links_name, weight_bytes):
    rates, links, w = RATES[rates_name], LINKS[links_name], weights(weight_bytes)
    one = compute_ms(b, ep, context, rates, w)
    half = compute_ms(b / 2, ep, context, rates, w)
    comm1, on_node, off_node = comm_ms(b, ep, links, 1)
    comm2, _, _ = comm_ms(b, ep, links, 2)
    no_overlap = one["total_ms"] + comm1
    overlap = max(2 * half["total_ms"], comm2)
    wgib, kvgib = memory_gib(b, ep, context, w)
    slots = MODEL["routed_experts"] // ep + PARAMS["redundant_slots_per_gpu"]
    return {
        "kind": "projection", "rates": rates_name, "links": links_name, "weight_bytes": weight_bytes,
        "ep": ep, "batch_per_gpu": b, "context": context, "expert_slots_per_gpu": slots,
        "rows_per_slot": round(b * MODEL["top_k"] / slots, 1),
        "slots_on_node_remote": round(on_node, 4), "slots_off_node": round(off_node, 4),
        "weights_gib": round(wgib, 1), "kv_gib": round(kvgib, 1),
        "fits": wgib + kvgib <= PARAMS["hbm_gib"] - PARAMS["reserve_gib"],
        "max_batch_that_fits": max(0, int((PARAMS["hbm_gib"] - PARAMS["reserve_gib"] - wgib) / (kvgib / b))),
        **{k: round(v, 2) for k, v in one.items()},
        "compute_two_microbatches_ms": round(2 * half["total_ms"], 2),
        "comm_ms": round(comm1, 2), "comm_two_microbatches_ms": round(comm2, 2),
        "step_no_overlap_ms": round(no_overlap, 2), "step_overlap_ms": round(overlap, 2),
        "tok_s_no_overlap": round(b / no_overlap * 1e3), "tok_s_overlap": round(b / overlap * 1e3),
        "user_tok_s_overlap": round(1e3 / overlap, 1),
    }


REFERENCES = [
    {"kind": "reference", "source": "DeepSeek, day 6 of Open Source Week: DeepSeek-V3/R1 inference system overview (2025-03-01)",
     "what": "production decode, DeepSeek-V3/R1 on H800, EP144 (2 routed + 1 shared expert per GPU), FP8, MTP on",
     "tok_s_per_node": 14800, "gpus_per_node": 8, "tok_s_per_gpu": 1850, "user_tok_s": "20-22"},
    {"kind": "reference", "source": "the seeds (shared/seeds/000, 002): DeepInfer, DeepSeek V4.1 Flash on SM100 GPUs",
     "what": "production decode 14K tok/s per GPU at 230 tok/s per user; offline EP64 test up to ~26K tok/s per GPU",
     "tok_s_per_gpu": [14000, 26000]},
    {"kind": "reference", "source": "DeepEP README, low-latency kernels (H800, CX7 400 Gb/s, 128 tokens, top-8, FP8 dispatch, bf16 combine)",
     "what": "published dispatch / combine latency per MoE layer", "ep": [8, 16, 32, 64],
     "dispatch_us": [77, 118, 155, 173], "combine_us": [114, 195, 273, 314]},
]


def table(rows_by_key, eps, batches):
    out = ["| EP | B | expert slots / GPU, rows a slot | GiB / GPU: weights + KV | slots off-node | link ms / step | "
           "2026-12-02 kernels | 2026-12-03 MLA kernel, grouped-GEMM rate | H200 ceilings |",
           "|---:|---:|---|---|---:|---:|---|---|---|"]
    for ep in eps:
        for b in batches:
            r = {name: rows_by_key[(name, ep, b)] for name in RATES}
            a = r["engine_2026_12_02"]
            fit = "" if a["fits"] else ", over"
            cells = [f"{x['tok_s_no_overlap']} / {x['tok_s_overlap']} "
                     f"({min(x['step_no_overlap_ms'], x['step_overlap_ms']):.0f})"
                     for x in (r["engine_2026_12_02"], r["engine_2026_12_03"], r["ceilings"])]
            out.append(f"| {ep} | {b} | {a['expert_slots_per_gpu']}, {a['rows_per_slot']:g} | "
                       f"{a['weights_gib']:.0f} + {a['kv_gib']:.0f}{fit} | {a['slots_off_node']:.1%} | "
                       f"{a['comm_ms']:.1f} | " + " | ".join(cells) + " |")
    return "\n".join(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--format", choices=["table", "jsonl"], default="table")
    ap.add_argument("--ep", default="8,16,32,64")
    ap.add_argument("--batch", default="64,128,256")
    ap.add_argument("--context", type=int, default=4096)
    ap.add_argument("--links", choices=sorted(LINKS), default="h200")
    ap.add_argument("--weight-bytes", type=float, default=2.0, help="bytes per weight (2: bf16 as the engine holds them)")
    args = ap.parse_args()
    eps = [int(x) for x in args.ep.split(",")]
    batches = [int(x) for x in args.batch.split(",")]
    rows = {}
    for name in RATES:
        for ep in eps:
            for b in batches:
                rows[(name, ep, b)] = project(ep, b, args.context, name, args.links, args.weight_bytes)
    if args.format == "table":
        print(table(rows, eps, batches))
        return
    print(json.dumps({"kind": "parameters", "model": MODEL, "rates": RATES, "ceilings": CEILINGS,
                      "links": {args.links: LINKS[args.links]}, **PARAMS}))
    for ref in REFERENCES:
        print(json.dumps(ref))
    for key in rows:
        print(json.dumps(rows[key]))


if __name__ == "__main__":
    sys.exit(main())
