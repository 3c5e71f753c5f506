#!/usr/bin/env python3
# Builds the sliding-window fixtures under tests/data/ (gpt_oss, gemma3, gemma3_old): tiny random
# transformers models with sinks, yarn, MoE, sliding and full layers, query_pre_attn_scalar,
# sandwich norms, GeGLU and final-logit soft-capping switched on, plus expected.json in the format
# of make_fixtures.py, whose helpers this script reuses. Needs torch + transformers (GptOss, Gemma3).
import json
import os
import shutil
import sys

import torch
import transformers
from safetensors import safe_open
from transformers import AutoModelForCausalLM

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_fixtures as mf  # noqa: E402

WINDOW = 8  # smaller than the 32 scored tokens and the 24 of prompt + generation
LAYER_TYPES = ["sliding_attention", "full_attention"]


def spec_list():
    """(name, config class name, model class name, overrides)."""
    return [
        # Sinks, q/k/v/o biases, yarn without truncation, 8 experts of width 37 with 3 per token
        # (keeps model.safetensors under 1 MiB), router bias.
        ("gpt_oss", "GptOssConfig", "GptOssForCausalLM",
         dict(head_dim=16, intermediate_size=37, num_local_experts=8, num_experts_per_tok=3, sliding_window=WINDOW,
              layer_types=LAYER_TYPES, max_position_embeddings=64,
              rope_parameters={"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0,
                               "original_max_position_embeddings": 16, "beta_fast": 32.0,
                               "beta_slow": 1.0, "truncate": False})),
        # query_pre_attn_scalar 24 != head_dim 16, soft-capping 2 (random logits are O(1)), linear
        # rope on the full layer only, tied embeddings (Gemma's default).
        ("gemma3", "Gemma3TextConfig", "Gemma3ForCausalLM",
         dict(head_dim=16, sliding_window=WINDOW, layer_types=LAYER_TYPES, query_pre_attn_scalar=24,
              final_logit_softcapping=2.0, attn_logit_softcapping=None, hidden_activation="gelu_pytorch_tanh",
              tie_word_embeddings=True,
              rope_parameters={"sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
                               "full_attention": {"rope_type": "linear", "rope_theta": 1000000.0,
                                                  "factor": 2.0}})),
    ]


def reinit(model, seed, gemma):
    """Every parameter matters numerically. Norms: 1 + 0.2 N(0,1), or 0.2 N(0,1) for Gemma's
    (1 + w) norms; sinks N(0,1) (the same order as the scores, so they move the softmax); router
    weights and bias 0.5 N(0,1) (the choice of experts depends on both); gate_up_proj 0.5 N(0,1) so
    the clamp at 7 engages; down_proj 0.02 N(0,1); everything else 0.05 N(0,1)."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "norm" in name and name.endswith("weight"):
                base = 0.0 if gemma else 1.0
                param.copy_(base + 0.2 * torch.randn(param.shape, generator=gen))
            elif name.endswith("sinks"):
                param.copy_(torch.randn(param.shape, generator=gen))
            elif ".router." in name:
                param.copy_(0.5 * torch.randn(param.shape, generator=gen))
            elif name.endswith("experts.gate_up_proj"):
                param.copy_(0.5 * torch.randn(param.shape, generator=gen))
            elif name.endswith("experts.down_proj"):
                param.copy_(0.02 * torch.randn(param.shape, generator=gen))
            else:
                param.copy_(0.05 * torch.randn(param.shape, generator=gen))


# transformers 5's default experts backend (torch grouped_mm) needs 16-byte aligned expert rows;
# the reference loop has no such limit and is the plainest statement of the computation.
EAGER_EXPERTS = {"GptOssConfig": dict(experts_implementation="eager")}


def make_config(cfg_name, overrides, changes=None):
    kwargs = dict(mf.COMMON)
    kwargs.update(overrides)
    kwargs.update(changes or {})
    kwargs.update(EAGER_EXPERTS.get(cfg_name, {}))
    return getattr(transformers, cfg_name)(**kwargs)


def build(cfg_name, model_name, overrides, seed):
    torch.manual_seed(seed)
    model = getattr(transformers, model_name)._from_config(make_config(cfg_name, overrides),
                                                           attn_implementation="eager")
    assert model.dtype == torch.float32, model.dtype
    reinit(model, seed, gemma=cfg_name.startswith("Gemma"))
    return model.eval()


def variant_diff(model, cfg_name, model_name, overrides, changes, tokens, edit=None):
    """Per-position max |logit change| when the same weights run with config `changes` (and the
    state dict passed through `edit`): a mechanism that barely moves the logits would let an
    engine that ignores it pass."""
    other = getattr(transformers, model_name)._from_config(make_config(cfg_name, overrides, changes),
                                                           attn_implementation="eager").eval()
    state = model.state_dict()
    if edit is not None:
        state = edit(dict(state))
    other.load_state_dict(state)
    return (mf.logits_of(model, tokens) - mf.logits_of(other, tokens)).abs().max(dim=-1).values


def window_rule(per_pos):
    changed = [i for i in range(len(per_pos)) if per_pos[i] > 1e-5]
    assert changed and changed[0] > 0, f"sliding window changed positions {changed}"
    assert float(per_pos[:changed[0]].max()) < 1e-6
    rule = "q - k < W" if changed[0] == WINDOW else ("q - k <= W" if changed[0] == WINDOW + 1 else "?")
    assert rule == "q - k < W", f"the window first changes position {changed[0]}, expected {WINDOW}"
    return f"window first changes pos {changed[0]} ({rule}), last-pos diff {float(per_pos[-1]):.3g}"


def clamp_fraction(model, tokens):
    """Fraction of gate values above the clamp limit and of |up| above it, over every expert, for
    the inputs the MoE blocks actually see: the clamp must engage for the fixture to test it."""
    seen = []
    hooks = [layer.mlp.register_forward_pre_hook(lambda m, args: seen.append(args[0].detach()))
             for layer in model.model.layers]
    try:
        mf.logits_of(model, tokens)
    finally:
        for h in hooks:
            h.remove()
    over_gate, over_up, total = 0, 0, 0
    for layer, x in zip(model.model.layers, seen):
        experts = layer.mlp.experts
        gate_up = torch.einsum("th,ehf->etf", x.reshape(-1, x.shape[-1]), experts.gate_up_proj)
        gate_up = gate_up + experts.gate_up_proj_bias[:, None, :]
        gate, up = gate_up[..., ::2], gate_up[..., 1::2]
        over_gate += int((gate > 7.0).sum())
        over_up += int((up.abs() > 7.0).sum())
        total += gate.numel()
    return over_gate / total, over_up / total


def checks(name, loaded, cfg_name, model_name, overrides, tokens):
    """Notes proving each mechanism is live in the fixture."""
    notes = []
    # A window longer than any sequence: the sliding layers attend fully but keep their own rope
    # (turning them into full layers would also give Gemma 3's their global rope).
    unbounded = {"sliding_window": 4096}
    notes.append(window_rule(variant_diff(loaded, cfg_name, model_name, overrides, unbounded, tokens)))
    if name == "gpt_oss":
        def zero_sinks(state):
            return {k: (torch.zeros_like(v) if k.endswith("sinks") else v) for k, v in state.items()}
        sinks = float(variant_diff(loaded, cfg_name, model_name, overrides, {}, tokens, zero_sinks).max())
        plain = {"rope_parameters": {"rope_type": "default", "rope_theta": 10000.0}}
        yarn = float(variant_diff(loaded, cfg_name, model_name, overrides, plain, tokens).max())
        gate, up = clamp_fraction(loaded, tokens)
        notes.append(f"sinks move logits by {sinks:.3g}, yarn by {yarn:.3g}; "
                     f"gate > 7 in {gate:.2%}, |up| > 7 in {up:.2%} of expert lanes")
        if min(sinks, yarn) < 1e-3 or gate == 0.0 or up == 0.0:
            notes.append("WARNING: a mechanism barely matters")
    else:
        cap = float(variant_diff(loaded, cfg_name, model_name, overrides,
                                 {"final_logit_softcapping": None}, tokens).max())
        scalar = float(variant_diff(loaded, cfg_name, model_name, overrides,
                                    {"query_pre_attn_scalar": 16}, tokens).max())
        rope = dict(overrides["rope_parameters"])
        rope["full_attention"] = {"rope_type": "default", "rope_theta": 1000000.0}
        linear = float(variant_diff(loaded, cfg_name, model_name, overrides, {"rope_parameters": rope},
                                    tokens).max())
        notes.append(f"softcap moves logits by {cap:.3g}, query_pre_attn_scalar by {scalar:.3g}, "
                     f"linear rope of the full layer by {linear:.3g}")
        if min(cap, scalar, linear) < 1e-3:
            notes.append("WARNING: a mechanism barely matters")
    return "; ".join(notes)


def tensor_shapes(path):
    with safe_open(path, "pt") as f:
        return {k: list(f.get_slice(k).get_shape()) for k in sorted(f.keys())}


def to_gemma3_old_format(path):
    """Gemma 3 as published before transformers 5: rope_theta / rope_local_base_freq at top level,
    the global layers' scaling in rope_scaling, sliding_window_pattern instead of layer_types."""
    with open(path) as f:
        cfg = json.load(f)
    rope = cfg.pop("rope_parameters")
    full = dict(rope["full_attention"])
    cfg["rope_theta"] = full.pop("rope_theta")
    cfg["rope_local_base_freq"] = rope["sliding_attention"]["rope_theta"]
    cfg["rope_scaling"] = full
    cfg["sliding_window_pattern"] = 2
    cfg.pop("layer_types", None)
    if "dtype" in cfg:
        cfg["torch_dtype"] = cfg.pop("dtype")
    with open(path, "w") as f:
        json.dump(cfg, f, indent=2, sort_keys=True)
        f.write("\n")


def make_old_copy(outdir, old_dir, loaded, tokens):
    """gemma3_old: the same weights and expected.json under the old config spelling, kept only if
    transformers reads it back to bit-identical logits."""
    shutil.rmtree(old_dir, ignore_errors=True)
    shutil.copytree(outdir, old_dir)
    to_gemma3_old_format(os.path.join(old_dir, "config.json"))
    try:
        old = AutoModelForCausalLM.from_pretrained(old_dir, attn_implementation="eager", dtype=torch.float32).eval()
        diff = float((mf.logits_of(old, tokens) - mf.logits_of(loaded, tokens)).abs().max())
    except Exception as e:  # an old spelling this transformers no longer reads: skip, say why
        shutil.rmtree(old_dir)
        return f"gemma3_old skipped: transformers could not load it ({e})"
    if diff > 0.0:
        shutil.rmtree(old_dir)
        return f"gemma3_old skipped: old-format logits differ by {diff}"
    with open(os.path.join(old_dir, "expected.json")) as f:
        expected = json.load(f)
    expected["name"], expected["config_format"] = "gemma3_old", "old"
    mf.write_expected(os.path.join(old_dir, "expected.json"), expected)
    return "gemma3_old: same logits under the old config spelling"


def main():
    args = mf.start("Write the sliding-window fixtures.")
    summary = []
    for index, (name, cfg_name, model_name, overrides) in enumerate(spec_list()):
        if args.only and name not in args.only:
            continue
        seed = 3000 + index
        model = build(cfg_name, model_name, overrides, seed)
        outdir = os.path.join(args.out, name)
        mf.save_fixture(model, outdir, name)
        weights = os.path.join(outdir, "model.safetensors")
        print(f"{name}: tensors {tensor_shapes(weights)}")

        gen = torch.Generator().manual_seed(seed)
        tokens = [int(t) for t in torch.randint(0, mf.VOCAB, (mf.SCORE_LEN,), generator=gen)]
        prompt = [int(t) for t in torch.randint(0, mf.VOCAB, (mf.PROMPT_LEN,), generator=gen)]
        loaded = AutoModelForCausalLM.from_pretrained(outdir, attn_implementation="eager", dtype=torch.float32,
                                                      **EAGER_EXPERTS.get(cfg_name, {})).eval()
        reload_diff = float((mf.logits_of(loaded, tokens) - mf.logits_of(model, tokens)).abs().max())
        assert reload_diff <= 1e-6, f"{name}: reloaded logits differ by {reload_diff}"
        print(f"{name}: loaded rope_parameters {loaded.config.rope_parameters}")
        try:
            note = checks(name, loaded, cfg_name, model_name, overrides, tokens)
        except Exception as e:  # the checks only document the fixture; the fixture stands without them
            note = f"WARNING: checks failed: {type(e).__name__}: {e}"
        print(f"{name}: {note}")

        greedy, cache_diff, size = mf.record_expected(loaded, outdir, name, "new", tokens, prompt)
        summary.append((name, size, min(greedy["margins"]), cache_diff, reload_diff, note))
        if name == "gemma3":
            old_note = make_old_copy(outdir, os.path.join(args.out, "gemma3_old"), loaded, tokens)
            print(old_note)
            summary.append(("gemma3_old", size, min(greedy["margins"]), cache_diff, 0.0, old_note))

    print("\nname        bytes    min_margin  cache_diff  reload_diff  notes")
    for name, size, margin, cdiff, rdiff, note in summary:
        print(f"{name:10s} {size:7d}  {margin:10.4g}  {cdiff:10.3g}  {rdiff:11.3g}  {note}")


if __name__ == "__main__":
    main()
