# Writes the trained model as a DeepSeek-V3 Hugging Face checkpoint: config.json, bf16 safetensors
# shards with DeepSeek's tensor names (the MTP module as model.layers.{num_hidden_layers}.*) and
# model.safetensors.index.json; reads such a checkpoint back into the training model.
import json
import os
import struct

import torch

from model import MoE

SAFETENSORS_DTYPES = {torch.bfloat16: "BF16", torch.float32: "F32", torch.float16: "F16"}
TORCH_DTYPES = {v: k for k, v in SAFETENSORS_DTYPES.items()}


def _layer_tensors(prefix, layer, cfg):
    out = {prefix + "input_layernorm.weight": layer.input_layernorm.weight,
           prefix + "post_attention_layernorm.weight": layer.post_attention_layernorm.weight}
    for name, p in layer.self_attn.named_parameters():
        out[prefix + "self_attn." + name] = p
    mlp = layer.mlp
    if isinstance(mlp, MoE):
        out[prefix + "mlp.gate.weight"] = mlp.gate_weight
        out[prefix + "mlp.gate.e_score_correction_bias"] = mlp.e_score_correction_bias
        for e in range(cfg.n_routed_experts):
            out[prefix + f"mlp.experts.{e}.gate_proj.weight"] = mlp.w_gate[e]
            out[prefix + f"mlp.experts.{e}.up_proj.weight"] = mlp.w_up[e]
            out[prefix + f"mlp.experts.{e}.down_proj.weight"] = mlp.w_down[e]
        for name, p in mlp.shared_experts.named_parameters():
            out[prefix + "mlp.shared_experts." + name] = p
    else:
        for name, p in mlp.named_parameters():
            out[prefix + "mlp." + name] = p
    return out


def checkpoint_views(model):
    """{DeepSeek tensor name: the training model's tensor (a view for stacked experts)}."""
    cfg = model.cfg
    out = {"model.embed_tokens.weight": model.embed_tokens.weight}
    for i, layer in enumerate(model.layers):
        out.update(_layer_tensors(f"model.layers.{i}.", layer, cfg))
    out["model.norm.weight"] = model.norm.weight
    out["lm_head.weight"] = model.lm_head.weight
    mtp = model.mtp
    p = f"model.layers.{cfg.num_hidden_layers}."
    # DeepSeek-V3's MTP layer carries its own copies of the shared embedding and head.
    out[p + "embed_tokens.weight"] = model.embed_tokens.weight
    out[p + "enorm.weight"] = mtp.enorm.weight
    out[p + "hnorm.weight"] = mtp.hnorm.weight
    out[p + "eh_proj.weight"] = mtp.eh_proj.weight
    out.update(_layer_tensors(p, mtp.block, cfg))
    out[p + "shared_head.norm.weight"] = mtp.shared_head_norm.weight
    out[p + "shared_head.head.weight"] = model.lm_head.weight
    out[p + "confidence_head.weight"] = mtp.confidence_head.weight
    out[p + "confidence_head.bias"] = mtp.confidence_head.bias
    return out


def hf_tensors(model):
    """Training model -> {DeepSeek name: CPU tensor}, bf16 except the router bias, kept in float32
    as DeepSeek's checkpoints do (bf16 would move expert choices)."""
    result = {}
    for name, t in checkpoint_views(model).items():
        t = t.detach().cpu()
        keep = name.endswith("e_score_correction_bias")
        result[name] = (t.float() if keep else t.to(torch.bfloat16)).contiguous()
    return result


def load_hf_tensors(model, tensors):
    """Inverse of hf_tensors: copies a {name: tensor} checkpoint into the training model."""
    views = checkpoint_views(model)
    missing = sorted(set(views) - set(tensors))
    extra = sorted(set(tensors) - set(views))
    assert not missing and not extra, f"missing {missing[:5]} extra {extra[:5]}"
    with torch.no_grad():
        for name, target in views.items():
            target.copy_(tensors[name])


def write_safetensors(path, tensors):
    """The safetensors format (8-byte little-endian header size, JSON header, raw data), written
    directly so the script needs no safetensors package where it is smoke-tested."""
    header, offset, blobs = {}, 0, []
    for name in sorted(tensors):
        t = tensors[name].contiguous()
        data = t.view(torch.uint8).numpy().tobytes() if t.dtype != torch.bfloat16 else \
            t.view(torch.int16).numpy().tobytes()
        header[name] = {"dtype": SAFETENSORS_DTYPES[t.dtype], "shape": list(t.shape),
                        "data_offsets": [offset, offset + len(data)]}
        blobs.append(data)
        offset += len(data)
    header["__metadata__"] = {"format": "pt"}
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(raw)))
        f.write(raw)
        for blob in blobs:
            f.write(blob)


def read_safetensors(path):
    with open(path, "rb") as f:
        size = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(size))
        data = f.read()
    out = {}
    for name, info in header.items():
        if name == "__metadata__":
            continue
        begin, end = info["data_offsets"]
        dtype = TORCH_DTYPES[info["dtype"]]
        raw = bytearray(data[begin:end])
        flat = torch.frombuffer(raw, dtype=torch.int16 if dtype == torch.bfloat16 else dtype)
        out[name] = (flat.view(torch.bfloat16) if dtype == torch.bfloat16 else flat).reshape(info["shape"])
    return out


def save_sharded(out_dir, tensors, max_shard_bytes):
    """Splits tensors (in name order) into shards under max_shard_bytes, plus the index file."""
    shards, current, size = [], {}, 0
    for name in sorted(tensors):
        nbytes = tensors[name].numel() * tensors[name].element_size()
        if current and size + nbytes > max_shard_bytes:
            shards.append(current)
            current, size = {}, 0
        current[name] = tensors[name]
        size += nbytes
    shards.append(current)
    weight_map, total = {}, 0
    for i, shard in enumerate(shards):
        fname = f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors"
        write_safetensors(os.path.join(out_dir, fname), shard)
        for name, t in shard.items():
            weight_map[name] = fname
            total += t.numel() * t.element_size()
    index = {"metadata": {"total_size": total}, "weight_map": dict(sorted(weight_map.items()))}
    with open(os.path.join(out_dir, "model.safetensors.index.json"), "w") as f:
        json.dump(index, f, indent=2)
        f.write("\n")
    return [f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors" for i in range(len(shards))]


def load_sharded(model_dir):
    with open(os.path.join(model_dir, "model.safetensors.index.json")) as f:
        index = json.load(f)
    tensors = {}
    for fname in sorted(set(index["weight_map"].values())):
        tensors.update(read_safetensors(os.path.join(model_dir, fname)))
    return tensors


def hf_config(cfg, bos_id, eos_id):
    """config.json in the spelling of DeepSeek-V3's published checkpoint (rope_theta at top level,
    torch_dtype), which transformers and deepinfer both read."""
    return {
        "architectures": ["DeepseekV3ForCausalLM"],
        "model_type": "deepseek_v3",
        "vocab_size": cfg.vocab_size,
        "hidden_size": cfg.hidden_size,
        "intermediate_size": cfg.intermediate_size,
        "moe_intermediate_size": cfg.moe_intermediate_size,
        "num_hidden_layers": cfg.num_hidden_layers,
        "num_nextn_predict_layers": 1,
        "num_attention_heads": cfg.num_attention_heads,
        "num_key_value_heads": cfg.num_attention_heads,
        "n_shared_experts": cfg.n_shared_experts,
        "n_routed_experts": cfg.n_routed_experts,
        "ep_size": 1,
        "routed_scaling_factor": cfg.routed_scaling_factor,
        "kv_lora_rank": cfg.kv_lora_rank,
        "q_lora_rank": cfg.q_lora_rank,
        "qk_rope_head_dim": cfg.qk_rope_head_dim,
        "qk_nope_head_dim": cfg.qk_nope_head_dim,
        "v_head_dim": cfg.v_head_dim,
        "topk_method": "noaux_tc",
        "n_group": 1,
        "topk_group": 1,
        "num_experts_per_tok": cfg.num_experts_per_tok,
        "moe_layer_freq": 1,
        "first_k_dense_replace": cfg.first_k_dense_replace,
        "norm_topk_prob": True,
        "scoring_func": "sigmoid",
        "hidden_act": "silu",
        "max_position_embeddings": cfg.max_position_embeddings,
        "initializer_range": cfg.initializer_range,
        "rms_norm_eps": cfg.rms_norm_eps,
        "rope_theta": cfg.rope_theta,
        "rope_interleave": True,
        "attention_bias": False,
        "attention_dropout": 0.0,
        "tie_word_embeddings": False,
        "use_cache": True,
        "bos_token_id": bos_id,
        "eos_token_id": eos_id,
        "torch_dtype": "bfloat16",
    }
