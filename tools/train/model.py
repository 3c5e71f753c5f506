# A small DeepSeek-V3 model in plain PyTorch (MLA, sigmoid-routed MoE with a shared expert, one
# MTP module and a confidence head), trainable on CPU or GPU, with export to the Hugging Face /
# DeepSeek tensor names. Pure torch so the training loop runs where transformers is missing.
import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn


@dataclass
class ModelConfig:
    vocab_size: int = 8192
    hidden_size: int = 256
    intermediate_size: int = 768        # the dense layers' MLP (first_k_dense_replace of them)
    moe_intermediate_size: int = 192    # each routed expert; the shared expert is n_shared times this
    num_hidden_layers: int = 3
    first_k_dense_replace: int = 1
    num_attention_heads: int = 8
    q_lora_rank: int = 128
    kv_lora_rank: int = 64
    qk_nope_head_dim: int = 32
    qk_rope_head_dim: int = 16
    v_head_dim: int = 32
    n_routed_experts: int = 8
    n_shared_experts: int = 1
    num_experts_per_tok: int = 2
    routed_scaling_factor: float = 2.5
    rms_norm_eps: float = 1e-6
    rope_theta: float = 10000.0
    max_position_embeddings: int = 2048
    initializer_range: float = 0.02

    @property
    def qk_head_dim(self):
        return self.qk_nope_head_dim + self.qk_rope_head_dim


class RMSNorm(nn.Module):
    def __init__(self, dim, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x):
        dtype = x.dtype
        x = x.float()
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * x.to(dtype)


def rope_tables(cfg, length, device):
    inv_freq = 1.0 / (cfg.rope_theta ** (torch.arange(0, cfg.qk_rope_head_dim, 2, device=device).float()
                                          / cfg.qk_rope_head_dim))
    angles = torch.outer(torch.arange(length, device=device).float(), inv_freq)
    return angles.cos(), angles.sin()


def apply_rope_interleaved(x, cos, sin):
    """Rotates pairs (2i, 2i+1) by position * theta^(-2i/d): DeepSeek's layout, which transformers
    reproduces with rope_interleave=True."""
    dtype = x.dtype
    pairs = x.float().unflatten(-1, (-1, 2))
    even, odd = pairs[..., 0], pairs[..., 1]
    out = torch.stack((even * cos - odd * sin, even * sin + odd * cos), dim=-1)
    return out.flatten(-2).to(dtype)


def causal_attention(q, k, v, scale):
    if hasattr(F, "scaled_dot_product_attention"):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=scale)
    scores = torch.matmul(q, k.transpose(-1, -2)).float() * scale
    length = q.shape[-2]
    mask = torch.ones(length, length, dtype=torch.bool, device=q.device).triu(1)
    probs = scores.masked_fill(mask, float("-inf")).softmax(-1).to(v.dtype)
    return torch.matmul(probs, v)


class MLA(nn.Module):
    """Multi-head latent attention: low-rank q, a shared compressed kv latent plus one rope key."""

    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        h, heads = cfg.hidden_size, cfg.num_attention_heads
        self.q_a_proj = nn.Linear(h, cfg.q_lora_rank, bias=False)
        self.q_a_layernorm = RMSNorm(cfg.q_lora_rank, cfg.rms_norm_eps)
        self.q_b_proj = nn.Linear(cfg.q_lora_rank, heads * cfg.qk_head_dim, bias=False)
        self.kv_a_proj_with_mqa = nn.Linear(h, cfg.kv_lora_rank + cfg.qk_rope_head_dim, bias=False)
        self.kv_a_layernorm = RMSNorm(cfg.kv_lora_rank, cfg.rms_norm_eps)
        self.kv_b_proj = nn.Linear(cfg.kv_lora_rank, heads * (cfg.qk_nope_head_dim + cfg.v_head_dim), bias=False)
        self.o_proj = nn.Linear(heads * cfg.v_head_dim, h, bias=False)

    def forward(self, x, cos, sin):
        cfg = self.cfg
        batch, length, _ = x.shape
        heads = cfg.num_attention_heads
        q = self.q_b_proj(self.q_a_layernorm(self.q_a_proj(x))).view(batch, length, heads, cfg.qk_head_dim)
        q_nope, q_rope = q.split([cfg.qk_nope_head_dim, cfg.qk_rope_head_dim], dim=-1)
        latent, k_rope = self.kv_a_proj_with_mqa(x).split([cfg.kv_lora_rank, cfg.qk_rope_head_dim], dim=-1)
        kv = self.kv_b_proj(self.kv_a_layernorm(latent)).view(batch, length, heads, -1)
        k_nope, v = kv.split([cfg.qk_nope_head_dim, cfg.v_head_dim], dim=-1)
        q_rope = apply_rope_interleaved(q_rope, cos[:, None], sin[:, None])
        k_rope = apply_rope_interleaved(k_rope, cos, sin)[:, :, None].expand(-1, -1, heads, -1)
        q = torch.cat((q_nope, q_rope), dim=-1).transpose(1, 2)
        k = torch.cat((k_nope, k_rope), dim=-1).transpose(1, 2)
        v = v.transpose(1, 2)
        if cfg.v_head_dim < cfg.qk_head_dim:  # equal head dims let SDPA pick its flash kernel
            v = F.pad(v, (0, cfg.qk_head_dim - cfg.v_head_dim))
        out = causal_attention(q, k, v, cfg.qk_head_dim ** -0.5)[..., :cfg.v_head_dim]
        return self.o_proj(out.transpose(1, 2).reshape(batch, length, heads * cfg.v_head_dim))


class MLP(nn.Module):
    def __init__(self, hidden, inter):
        super().__init__()
        self.gate_proj = nn.Linear(hidden, inter, bias=False)
        self.up_proj = nn.Linear(hidden, inter, bias=False)
        self.down_proj = nn.Linear(inter, hidden, bias=False)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class MoE(nn.Module):
    """DeepSeek-V3 routing: sigmoid scores; the top-k of score + e_score_correction_bias picks the
    experts, the picked raw scores (normalised, times routed_scaling_factor) weight them. The bias
    is not trained by gradients: update_bias applies the auxiliary-loss-free balancing rule."""

    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        e, h, inter = cfg.n_routed_experts, cfg.hidden_size, cfg.moe_intermediate_size
        self.gate_weight = nn.Parameter(torch.empty(e, h))
        self.register_buffer("e_score_correction_bias", torch.zeros(e))
        # Stacked experts: every expert runs on every token and unpicked ones get weight 0. At this
        # size that is cheaper on a GPU than gathering tokens per expert.
        self.w_gate = nn.Parameter(torch.empty(e, inter, h))
        self.w_up = nn.Parameter(torch.empty(e, inter, h))
        self.w_down = nn.Parameter(torch.empty(e, h, inter))
        self.shared_experts = MLP(h, inter * cfg.n_shared_experts)
        self.last_load = None

    def route(self, x):
        # Routing in float32 even under autocast, as inference runs it.
        with torch.autocast(device_type=x.device.type, enabled=False):
            scores = F.linear(x.float(), self.gate_weight.float()).sigmoid()
        picked = torch.topk(scores.detach() + self.e_score_correction_bias, self.cfg.num_experts_per_tok,
                            dim=-1).indices
        weights = scores.gather(-1, picked)
        weights = weights / (weights.sum(-1, keepdim=True) + 1e-20) * self.cfg.routed_scaling_factor
        return picked, weights

    def forward(self, x):
        shape = x.shape
        flat = x.reshape(-1, shape[-1])
        picked, weights = self.route(flat)
        dense = torch.zeros(flat.shape[0], self.cfg.n_routed_experts, device=x.device,
                            dtype=weights.dtype).scatter(1, picked, weights)
        with torch.no_grad():
            self.last_load = torch.bincount(picked.flatten(), minlength=self.cfg.n_routed_experts)
        hidden = F.silu(torch.matmul(flat, self.w_gate.transpose(1, 2))) * torch.matmul(flat, self.w_up.transpose(1, 2))
        routed = torch.matmul(hidden, self.w_down.transpose(1, 2))  # [experts, tokens, hidden]
        out = torch.einsum("eth,te->th", routed, dense.to(routed.dtype))
        return (out + self.shared_experts(flat)).view(shape)

    @torch.no_grad()
    def update_bias(self, step_size):
        """Raises the bias of under-loaded experts and lowers over-loaded ones (DeepSeek-V3 sec. 2.1.2)."""
        if self.last_load is None:
            return
        load = self.last_load.float()
        self.e_score_correction_bias += step_size * torch.sign(load.mean() - load)


class DecoderLayer(nn.Module):
    def __init__(self, cfg, dense):
        super().__init__()
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.self_attn = MLA(cfg)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.mlp = MLP(cfg.hidden_size, cfg.intermediate_size) if dense else MoE(cfg)

    def forward(self, x, cos, sin):
        x = x + self.self_attn(self.input_layernorm(x), cos, sin)
        return x + self.mlp(self.post_attention_layernorm(x))


class MTPModule(nn.Module):
    """DeepSeek-V3 multi-token prediction, depth 1: position i combines the main model's final
    (normed) hidden state h_i with the embedding of token i+1 and predicts token i+2.
    The embedding and output head are the main model's (shared, as in the paper)."""

    def __init__(self, cfg):
        super().__init__()
        h = cfg.hidden_size
        self.enorm = RMSNorm(h, cfg.rms_norm_eps)
        self.hnorm = RMSNorm(h, cfg.rms_norm_eps)
        self.eh_proj = nn.Linear(2 * h, h, bias=False)
        self.block = DecoderLayer(cfg, dense=cfg.first_k_dense_replace > cfg.num_hidden_layers)
        self.shared_head_norm = RMSNorm(h, cfg.rms_norm_eps)
        # The DSpark confidence head: P(draft token == main model's greedy token) from the block's
        # output (before shared_head.norm).
        self.confidence_head = nn.Linear(h, 1, bias=True)

    def forward(self, main_hidden, next_embeds, cos, sin):
        x = self.eh_proj(torch.cat((self.enorm(next_embeds), self.hnorm(main_hidden)), dim=-1))
        return self.block(x, cos, sin)


class DeepSeekV3(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.layers = nn.ModuleList([DecoderLayer(cfg, dense=i < cfg.first_k_dense_replace)
                                     for i in range(cfg.num_hidden_layers)])
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.lm_head = nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False)
        self.mtp = MTPModule(cfg)
        self.reset_parameters()

    def reset_parameters(self):
        std = self.cfg.initializer_range
        for name, p in self.named_parameters():
            if p.dim() >= 2:
                nn.init.normal_(p, std=std)
            elif "confidence_head" in name:
                nn.init.zeros_(p)
            else:
                nn.init.ones_(p)
        # Residual outputs start smaller so the stack begins close to identity.
        for name, p in self.named_parameters():
            if name.endswith(("o_proj.weight", "down_proj.weight", "w_down")):
                p.data.mul_(1.0 / math.sqrt(2 * (self.cfg.num_hidden_layers + 1)))

    def moe_layers(self):
        return [m for m in self.modules() if isinstance(m, MoE)]

    def forward(self, tokens, with_mtp=True):
        """tokens [B, L] -> (main logits [B, L, V], mtp logits [B, L-1, V] predicting tokens 2..L,
        confidence logits [B, L-1], mtp hidden). Positions follow the main sequence."""
        length = tokens.shape[1]
        cos, sin = rope_tables(self.cfg, length, tokens.device)
        x = self.embed_tokens(tokens)
        embeds = x
        for layer in self.layers:
            x = layer(x, cos, sin)
        hidden = self.norm(x)
        logits = self.lm_head(hidden)
        if not with_mtp:
            return logits, None, None
        mtp_hidden = self.mtp(hidden[:, :-1], embeds[:, 1:], cos[:-1], sin[:-1])
        mtp_logits = self.lm_head(self.mtp.shared_head_norm(mtp_hidden))
        confidence = self.mtp.confidence_head(mtp_hidden.detach()).squeeze(-1)
        return logits, mtp_logits, confidence


def count_saved_parameters(cfg):
    """Parameters in the saved checkpoint: the training model plus the MTP layer's copies of the
    embedding and output head that DeepSeek's layout stores."""
    model = DeepSeekV3(cfg)
    trained = sum(p.numel() for p in model.parameters())
    buffers = sum(b.numel() for b in model.buffers())
    return trained + buffers + 2 * cfg.vocab_size * cfg.hidden_size

