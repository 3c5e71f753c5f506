#!/usr/bin/env python3
# Builds the MoE / MLA fixtures under tests/data/ (deepseek_v2, deepseek_v3, qwen3_moe, mixtral,
# and deepseek_v3_fp8 when torch has float8): tiny random transformers models with routing,
# grouped top-k, shared experts and latent attention switched on, plus expected.json in the
# format of make_fixtures.py, whose helpers this script reuses. Needs torch + transformers.
import json
import os
import re
import shutil
import sys
import traceback

import torch
import transformers
from safetensors.torch import load_file, save_file
from transformers import AutoModelForCausalLM

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_fixtures as mf  # noqa: E402

# MLA shapes: v_head_dim != qk_nope_head_dim and rope dims < nope dims so no split can be confused.
MLA = dict(num_attention_heads=4, num_key_value_heads=4, kv_lora_rank=32, qk_nope_head_dim=16,
           qk_rope_head_dim=8, v_head_dim=12)
FP8_BLOCK = 16  # block size of the fp8 fixture's scales: several blocks per matrix at these sizes
# transformers 5's default experts backend (torch grouped_mm) needs 16-byte aligned expert rows;
# the eager loop has no such limit and is the plainest statement of the computation.
EAGER = dict(experts_implementation="eager")


def spec_list():
    """(name, config class name, model class name, overrides, config_format, notes)."""
    return [
        # q_lora_rank null (plain q_proj), softmax scoring, group-limited greedy over 4 groups.
        ("deepseek_v2", "DeepseekV2Config", "DeepseekV2ForCausalLM",
         dict(MLA, q_lora_rank=None, n_routed_experts=16, num_experts_per_tok=3, n_group=4, topk_group=2,
              topk_method="group_limited_greedy", norm_topk_prob=False, n_shared_experts=1,
              moe_intermediate_size=37,
              routed_scaling_factor=1.5, first_k_dense_replace=0,
              rope_parameters={"rope_type": "default", "rope_theta": 10000.0}), "new"),
        # q_lora, sigmoid + e_score_correction_bias, noaux_tc grouped top-k, yarn with mscale
        # correction, one dense layer before the MoE one, a shared expert. Published spelling.
        ("deepseek_v3", "DeepseekV3Config", "DeepseekV3ForCausalLM",
         dict(MLA, q_lora_rank=48, n_routed_experts=16, num_experts_per_tok=3, n_group=4, topk_group=2,
              n_shared_experts=1, moe_intermediate_size=37, routed_scaling_factor=2.5,
              norm_topk_prob=True, first_k_dense_replace=1, max_position_embeddings=256,
              rope_parameters={"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0,
                               "original_max_position_embeddings": 64, "beta_fast": 32.0,
                               "beta_slow": 1.0, "mscale": 1.0, "mscale_all_dim": 0.8}), "old"),
        # softmax top-k with norm_topk_prob, qk-norm, layer 0 dense through mlp_only_layers.
        ("qwen3_moe", "Qwen3MoeConfig", "Qwen3MoeForCausalLM",
         dict(head_dim=24, num_experts=8, num_experts_per_tok=3, moe_intermediate_size=37,
              norm_topk_prob=True, decoder_sparse_step=1, mlp_only_layers=[0],
              rope_parameters={"rope_type": "default", "rope_theta": 1000000.0}), "new"),
        # softmax over all experts, top-2, renormalised; sliding window on every layer.
        ("mixtral", "MixtralConfig", "MixtralForCausalLM",
         dict(head_dim=16, num_local_experts=8, num_experts_per_tok=2, sliding_window=8,
              rope_parameters={"rope_type": "default", "rope_theta": 1000000.0}), "old"),
    ]


def reinit_all(model, seed):
    """Every parameter matters numerically: norms 1 + 0.2 N(0,1), everything else (3-D expert
    tensors and routers included) 0.05 N(0,1); DeepSeek-V3's selection bias U(-0.1, 0.1)."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "norm" in name and name.endswith("weight"):
                param.copy_(1.0 + 0.2 * torch.randn(param.shape, generator=gen))
            else:
                param.copy_(0.05 * torch.randn(param.shape, generator=gen))
        for name, buf in model.named_buffers():
            if name.endswith("e_score_correction_bias"):
                buf.copy_(0.2 * torch.rand(buf.shape, generator=gen) - 0.1)


def build(cfg_name, model_name, overrides, seed):
    kwargs = dict(mf.COMMON)
    kwargs.update(overrides)
    kwargs.update(EAGER)
    config = getattr(transformers, cfg_name)(**kwargs)
    torch.manual_seed(seed)
    model = getattr(transformers, model_name)._from_config(config, attn_implementation="eager")
    assert model.dtype == torch.float32, model.dtype
    reinit_all(model, seed)
    return model.eval()


def to_published_experts(path, model_type):
    """Rewrites transformers 5's fused expert tensors (experts.gate_up_proj [E, 2I, H],
    experts.down_proj [E, H, I]) into the per-expert tensors of published checkpoints; Mixtral
    also gets its block_sparse_moe / w1 w3 w2 names. Returns what it did."""
    tensors = load_file(path)
    out = {}
    changed = []
    mixtral = model_type == "mixtral"
    names = ("w1", "w3", "w2") if mixtral else ("gate_proj", "up_proj", "down_proj")
    for key, value in tensors.items():
        m = re.match(r"(.*)\.experts\.(gate_up_proj|down_proj)$", key)
        base = m.group(1) if m else None
        if mixtral and base is None and key.endswith(".mlp.gate.weight"):
            out[key.replace(".mlp.gate.", ".block_sparse_moe.gate.")] = value
            changed.append(key)
            continue
        if base is None:
            out[key] = value
            continue
        if mixtral:
            base = base.replace(".mlp", ".block_sparse_moe")
        changed.append(key)
        for e in range(value.shape[0]):
            if m.group(2) == "gate_up_proj":
                inter = value.shape[1] // 2
                out[f"{base}.experts.{e}.{names[0]}.weight"] = value[e, :inter].contiguous()
                out[f"{base}.experts.{e}.{names[1]}.weight"] = value[e, inter:].contiguous()
            else:
                out[f"{base}.experts.{e}.{names[2]}.weight"] = value[e].contiguous()
    if changed:
        save_file(out, path, metadata={"format": "pt"})
    return changed


def fp8_quantize(weight, block):
    """[N, K] float -> (float8_e4m3fn weight, float32 scale_inv [ceil(N/b), ceil(K/b)]) as in
    DeepSeek-V3's checkpoints: weight ~= fp8 * scale_inv per block."""
    n, k = weight.shape
    rows, cols = (n + block - 1) // block, (k + block - 1) // block
    scale_inv = torch.empty(rows, cols, dtype=torch.float32)
    q = torch.empty(n, k, dtype=torch.float8_e4m3fn)
    fp8_max = torch.finfo(torch.float8_e4m3fn).max
    for i in range(rows):
        for j in range(cols):
            blk = weight[i * block:(i + 1) * block, j * block:(j + 1) * block].float()
            s = max(float(blk.abs().max()) / fp8_max, 1e-12)
            scale_inv[i, j] = s
            q[i * block:(i + 1) * block, j * block:(j + 1) * block] = (blk / s).to(torch.float8_e4m3fn)
    return q, scale_inv


def fp8_dequantize(q, scale_inv, block):
    n, k = q.shape
    s = scale_inv.repeat_interleave(block, 0)[:n].repeat_interleave(block, 1)[:, :k]
    return q.float() * s


def make_fp8(src_dir, outdir):
    """deepseek_v3 with every decoder-layer linear weight except the router in fp8 e4m3 with
    block scales. Returns the quantised names and a transformers model of the dequantised
    weights (loaded from a float32 copy of the checkpoint), whose outputs are the expected ones."""
    shutil.copytree(src_dir, outdir)
    tensors = load_file(os.path.join(src_dir, "model.safetensors"))
    out, dequantised, quantized = {}, {}, []
    for key, value in tensors.items():
        if (key.startswith("model.layers.") and key.endswith(".weight") and value.dim() == 2
                and "norm" not in key and not key.endswith("mlp.gate.weight")):
            q, scale_inv = fp8_quantize(value, FP8_BLOCK)
            out[key] = q
            out[key + "_scale_inv"] = scale_inv
            dequantised[key] = fp8_dequantize(q, scale_inv, FP8_BLOCK).contiguous()
            quantized.append(key)
        else:
            out[key] = value
            dequantised[key] = value
    save_file(out, os.path.join(outdir, "model.safetensors"), metadata={"format": "pt"})
    deq_dir = outdir + "_dequantised"
    shutil.rmtree(deq_dir, ignore_errors=True)
    shutil.copytree(src_dir, deq_dir)
    save_file(dequantised, os.path.join(deq_dir, "model.safetensors"), metadata={"format": "pt"})
    model = AutoModelForCausalLM.from_pretrained(deq_dir, attn_implementation="eager", dtype=torch.float32, **EAGER).eval()
    shutil.rmtree(deq_dir)
    with open(os.path.join(outdir, "config.json")) as f:
        cfg = json.load(f)
    cfg["quantization_config"] = {"quant_method": "fp8", "fmt": "e4m3", "activation_scheme": "dynamic",
                                  "weight_block_size": [FP8_BLOCK, FP8_BLOCK]}
    with open(os.path.join(outdir, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2, sort_keys=True)
        f.write("\n")
    return quantized, model


def expected_for(model, name, fmt, seed):
    gen = torch.Generator().manual_seed(seed)
    tokens = [int(t) for t in torch.randint(0, mf.VOCAB, (mf.SCORE_LEN,), generator=gen)]
    prompt = [int(t) for t in torch.randint(0, mf.VOCAB, (mf.PROMPT_LEN,), generator=gen)]
    greedy, cache_diff = mf.greedy_section(model, prompt)
    expected = {"name": name, "architecture": type(model).__name__, "config_format": fmt,
                "score": mf.score_section(model, tokens), "greedy": greedy}
    return expected, cache_diff, tokens


def main():
    args = mf.start("Write the MoE / MLA fixtures.")
    summary = []
    failed = []
    for index, (name, cfg_name, model_name, overrides, fmt) in enumerate(spec_list()):
        if args.only and name not in args.only and not (name == "deepseek_v3" and "deepseek_v3_fp8" in args.only):
            continue
        # One fixture's failure must not cost the others: report it and go on.
        try:
            make_one(args, index, name, cfg_name, model_name, overrides, fmt, summary)
        except Exception:  # noqa: BLE001
            traceback.print_exc()
            failed.append(name)
            shutil.rmtree(os.path.join(args.out, name), ignore_errors=True)

    print("\nname             bytes    min_margin  cache_diff  reload_diff  experts layout")
    for name, size, margin, cdiff, rdiff, layout in summary:
        print(f"{name:16s} {size:7d}  {margin:10.4g}  {cdiff:10.3g}  {rdiff:11.3g}  {layout}")
    if failed:
        print(f"FAILED: {failed}")
        sys.exit(1)


def make_one(args, index, name, cfg_name, model_name, overrides, fmt, summary):
    seed = 2000 + index
    model = build(cfg_name, model_name, overrides, seed)
    outdir = os.path.join(args.out, name)
    mf.save_fixture(model, outdir, name)
    weights = os.path.join(outdir, "model.safetensors")
    print(f"{name}: tensors as saved: {mf.tensor_names(weights)}")
    # qwen3_moe keeps whatever layout transformers saves; the others get the published one.
    layout = "as saved"
    if name != "qwen3_moe":
        changed = to_published_experts(weights, getattr(model.config, "model_type", ""))
        layout = f"rewritten to per-expert ({len(changed)} tensors)" if changed else "per-expert as saved"
    if fmt == "old":
        mf.to_old_format(os.path.join(outdir, "config.json"))

    loaded = AutoModelForCausalLM.from_pretrained(outdir, attn_implementation="eager",
                                                  dtype=torch.float32, **EAGER).eval()
    probe = [int(t) for t in torch.randint(0, mf.VOCAB, (mf.SCORE_LEN,),
                                           generator=torch.Generator().manual_seed(seed))]
    reload_diff = float((mf.logits_of(loaded, probe) - mf.logits_of(model, probe)).abs().max())
    assert reload_diff <= 1e-6, f"{name}: reloaded logits differ by {reload_diff}"
    got = dict(loaded.config.rope_parameters)
    for key, value in overrides["rope_parameters"].items():
        if got.get(key) != value:
            print(f"WARNING {name}: reloaded rope {key} is {got.get(key)}, written {value}")
    if name == "deepseek_v3":
        bias = [b for n, b in loaded.named_buffers() if n.endswith("e_score_correction_bias")]
        assert bias and float(bias[0].abs().max()) > 0.01, "e_score_correction_bias did not survive the reload"

    expected, cache_diff, _ = expected_for(loaded, name, fmt, seed)
    mf.write_expected(os.path.join(outdir, "expected.json"), expected)
    size = os.path.getsize(weights)
    assert size < 2 << 20, f"{name}: model.safetensors is {size} bytes"
    summary.append((name, size, min(expected["greedy"]["margins"]), cache_diff, reload_diff, layout))
    print(f"{name}: final tensors {mf.tensor_names(weights)}")

    if name == "deepseek_v3" and hasattr(torch, "float8_e4m3fn"):
        fp8_dir = os.path.join(args.out, "deepseek_v3_fp8")
        shutil.rmtree(fp8_dir, ignore_errors=True)
        quantized, dequantised_model = make_fp8(outdir, fp8_dir)
        fp8_expected, fp8_cache_diff, _ = expected_for(dequantised_model, "deepseek_v3_fp8", fmt, seed)
        mf.write_expected(os.path.join(fp8_dir, "expected.json"), fp8_expected)
        summary.append(("deepseek_v3_fp8", os.path.getsize(os.path.join(fp8_dir, "model.safetensors")),
                        min(fp8_expected["greedy"]["margins"]), fp8_cache_diff, 0.0,
                        f"{len(quantized)} fp8 tensors, block {FP8_BLOCK}"))


if __name__ == "__main__":
    main()
