#!/usr/bin/env python3
# Builds the tiny random transformers models under tests/data/ and their expected.json
# (top-k log-probs of a scored sequence and a greedy continuation), the numeric oracle
# that deepinfer's model tests compare against. Needs torch + transformers; see README.md.
import argparse
import json
import os
import shutil
import sys

import torch
import transformers
from transformers import (AutoModelForCausalLM, GenerationConfig, LlamaConfig, LlamaForCausalLM,
                          MistralConfig, MistralForCausalLM, Qwen2Config, Qwen2ForCausalLM,
                          Qwen3Config, Qwen3ForCausalLM)

VOCAB = 397
SCORE_LEN = 32
TOP_K = 8
PROMPT_LEN = 8
NEW_TOKENS = 16
KEEP_FILES = {"config.json", "generation_config.json", "model.safetensors", "expected.json"}

# Shared by every fixture: odd sizes so no kernel can lean on powers of two, GQA (4 q / 2 kv heads).
COMMON = dict(vocab_size=VOCAB, hidden_size=64, intermediate_size=131, num_hidden_layers=2,
              num_attention_heads=4, num_key_value_heads=2, rms_norm_eps=1e-5,
              max_position_embeddings=256, bos_token_id=None, eos_token_id=None, pad_token_id=None,
              tie_word_embeddings=False)


def spec_list():
    """(name, config class, model class, config overrides, config_format)."""
    return [
        ("llama", LlamaConfig, LlamaForCausalLM,
         dict(rope_parameters={"rope_type": "default", "rope_theta": 10000.0}), "new"),
        ("llama3_tied", LlamaConfig, LlamaForCausalLM,
         dict(tie_word_embeddings=True, max_position_embeddings=512,
              rope_parameters={"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0,
                               "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                               "original_max_position_embeddings": 64}), "old"),
        ("llama_linear", LlamaConfig, LlamaForCausalLM,
         dict(rope_parameters={"rope_type": "linear", "rope_theta": 10000.0, "factor": 2.0}), "new"),
        ("qwen2", Qwen2Config, Qwen2ForCausalLM,
         dict(rope_parameters={"rope_type": "default", "rope_theta": 1000000.0}), "new"),
        ("qwen3", Qwen3Config, Qwen3ForCausalLM,
         dict(head_dim=24, rope_parameters={"rope_type": "default", "rope_theta": 1000000.0}), "new"),
        # theta 10000 puts the yarn ramp (beta_fast 32 .. beta_slow 1) across the first rotary
        # pairs, so extrapolated, blended and interpolated frequencies are all exercised.
        ("qwen3_yarn", Qwen3Config, Qwen3ForCausalLM,
         dict(head_dim=24, max_position_embeddings=64,
              rope_parameters={"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0,
                               "original_max_position_embeddings": 16}), "new"),
        ("mistral_swa", MistralConfig, MistralForCausalLM,
         dict(head_dim=16, sliding_window=8,
              rope_parameters={"rope_type": "default", "rope_theta": 10000.0}), "new"),
    ]


def reinit(model, seed):
    """Replaces the library's init (tiny stds, unit norms, zero biases) with values that make
    every weight matter numerically."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for module in model.modules():
            if "RMSNorm" in type(module).__name__:
                module.weight.copy_(1.0 + 0.2 * torch.randn(module.weight.shape, generator=gen))
            elif isinstance(module, (torch.nn.Linear, torch.nn.Embedding)):
                module.weight.copy_(0.05 * torch.randn(module.weight.shape, generator=gen))
                bias = getattr(module, "bias", None)
                if bias is not None:
                    bias.copy_(0.05 * torch.randn(bias.shape, generator=gen))


def build(cfg_cls, model_cls, overrides, seed):
    kwargs = dict(COMMON)
    kwargs.update(overrides)
    config = cfg_cls(**kwargs)
    torch.manual_seed(seed)
    model = model_cls._from_config(config, attn_implementation="eager")
    assert model.dtype == torch.float32, model.dtype
    reinit(model, seed)
    return model.eval()


def logits_of(model, ids):
    with torch.no_grad():
        return model(input_ids=torch.tensor([ids]), use_cache=False).logits[0].float()


def to_old_format(path):
    """Rewrites config.json the way published llama3 checkpoints spell it: rope_scaling without
    the theta, rope_theta at top level, torch_dtype instead of dtype."""
    with open(path) as f:
        cfg = json.load(f)
    rope = dict(cfg.pop("rope_parameters"))
    cfg["rope_theta"] = rope.pop("rope_theta", cfg.get("rope_theta"))
    cfg["rope_scaling"] = rope
    if "dtype" in cfg:
        cfg["torch_dtype"] = cfg.pop("dtype")
    with open(path, "w") as f:
        json.dump(cfg, f, indent=2, sort_keys=True)
        f.write("\n")


def score_section(model, tokens):
    logits = logits_of(model, tokens)
    logprobs = torch.log_softmax(logits.double(), dim=-1)
    top = torch.topk(logprobs, TOP_K, dim=-1)
    positions = []
    for i in range(len(tokens)):
        positions.append({"pos": i, "token": tokens[i],
                          "top": [[int(t), float(v)] for v, t in zip(top.values[i], top.indices[i])]})
    return {"tokens": tokens, "top_k": TOP_K, "positions": positions}


def greedy_section(model, prompt):
    gen_cfg = GenerationConfig(do_sample=False, max_new_tokens=NEW_TOKENS, min_new_tokens=NEW_TOKENS,
                               eos_token_id=None, pad_token_id=None, bos_token_id=None,
                               output_logits=True, return_dict_in_generate=True)
    with torch.no_grad():
        out = model.generate(input_ids=torch.tensor([prompt]),
                             attention_mask=torch.ones(1, len(prompt), dtype=torch.long),
                             generation_config=gen_cfg)
    new = [int(t) for t in out.sequences[0, len(prompt):]]
    assert len(new) == NEW_TOKENS, new
    margins = []
    step_logits = torch.stack([l[0].float() for l in out.logits])
    for row in step_logits.double():
        two = torch.topk(row, 2).values
        margins.append(float(two[0] - two[1]))
    # The cached decode must agree with a plain full-sequence forward; this also guards the
    # sliding-window cache, whose prompt+generation (24) outgrows the window.
    full = logits_of(model, prompt + new[:-1])[len(prompt) - 1:]
    diff = float((full - step_logits).abs().max())
    assert diff < 1e-4, f"cached vs full logits differ by {diff}"
    for step, (tok, margin) in enumerate(zip(new, margins)):
        if margin > 1e-3:
            assert int(full[step].argmax()) == tok, (step, tok)
    return {"prompt": prompt, "max_tokens": NEW_TOKENS, "tokens": new, "margins": margins}, diff


def check_sliding_window(model, config_cls, overrides, tokens):
    """Proves transformers applies the window, and finds its exact rule: the first position whose
    logits change is the window size W if a query sees keys with q - k < W."""
    kwargs = dict(COMMON)
    kwargs.update(overrides)
    kwargs["sliding_window"] = None
    full_model = MistralForCausalLM._from_config(config_cls(**kwargs),
                                                 attn_implementation="eager").eval()
    full_model.load_state_dict(model.state_dict())
    a = logits_of(model, tokens)
    b = logits_of(full_model, tokens)
    per_pos = (a - b).abs().max(dim=-1).values
    window = overrides["sliding_window"]
    changed = [i for i in range(len(tokens)) if per_pos[i] > 1e-5]
    assert changed and changed[0] > 0, f"sliding_window changed positions {changed}"
    assert float(per_pos[-1]) > 1e-3, "late positions should differ from full attention"
    assert float(per_pos[:changed[0]].max()) < 1e-6
    rule = "q - k < W" if changed[0] == window else ("q - k <= W" if changed[0] == window + 1 else "?")
    return changed[0], rule, float(per_pos[-1])


def rope_effect(model, cfg_cls, model_cls, overrides, tokens):
    """Largest logit change when the same weights run with plain rope: a fixture whose scaling
    barely moves the logits could not catch an engine that ignores it."""
    rope = overrides["rope_parameters"]
    kwargs = dict(COMMON)
    kwargs.update(overrides)
    kwargs["rope_parameters"] = {"rope_type": "default", "rope_theta": rope["rope_theta"]}
    plain = model_cls._from_config(cfg_cls(**kwargs), attn_implementation="eager").eval()
    plain.load_state_dict(model.state_dict())
    return float((logits_of(model, tokens) - logits_of(plain, tokens)).abs().max())


def write_expected(path, expected):
    """Indented JSON with each token list and each scored position on one line, so diffs of a
    regenerated fixture stay readable."""
    score = expected["score"]
    lines = ["{"]
    for key in ("name", "architecture", "config_format"):
        lines.append(f' {json.dumps(key)}: {json.dumps(expected[key])},')
    lines.append(' "score": {')
    lines.append(f'  "tokens": {json.dumps(score["tokens"])},')
    lines.append(f'  "top_k": {score["top_k"]},')
    lines.append('  "positions": [')
    rows = [f'   {json.dumps(p)}' for p in score["positions"]]
    lines.append(",\n".join(rows))
    lines.append('  ]')
    lines.append(' },')
    greedy = expected["greedy"]
    lines.append(' "greedy": {')
    items = [f'  {json.dumps(k)}: {json.dumps(greedy[k])}' for k in greedy]
    lines.append(",\n".join(items))
    lines.append(' }')
    lines.append("}")
    text = "\n".join(lines) + "\n"
    assert json.loads(text) == expected
    with open(path, "w") as f:
        f.write(text)


def record_expected(model, outdir, name, fmt, tokens, prompt):
    """Writes outdir/expected.json (the scored sequence and the greedy continuation of the model as
    reloaded from outdir) and checks model.safetensors stays under 1 MiB; returns (greedy section,
    cached-vs-full logits difference, model.safetensors bytes)."""
    greedy, cache_diff = greedy_section(model, prompt)
    expected = {"name": name, "architecture": type(model).__name__, "config_format": fmt,
                "score": score_section(model, tokens), "greedy": greedy}
    write_expected(os.path.join(outdir, "expected.json"), expected)
    size = os.path.getsize(os.path.join(outdir, "model.safetensors"))
    assert size < 1 << 20, f"{name}: model.safetensors is {size} bytes"
    return greedy, cache_diff, size


def tensor_names(path):
    from safetensors import safe_open
    with safe_open(path, "pt") as f:
        return sorted(f.keys())


def save_fixture(model, outdir, name):
    """Saves model + generation config into a fresh outdir, keeps only KEEP_FILES, prints the
    config.json transformers wrote; returns the names of the files it removed."""
    shutil.rmtree(outdir, ignore_errors=True)
    model.save_pretrained(outdir, safe_serialization=True)
    model.generation_config.save_pretrained(outdir)
    extra = sorted(set(os.listdir(outdir)) - KEEP_FILES)
    for fname in extra:
        os.remove(os.path.join(outdir, fname))
    with open(os.path.join(outdir, "config.json")) as f:
        print(f"--- {name}: config.json as transformers wrote it:\n{json.dumps(json.load(f), sort_keys=True)}")
    return extra


def start(description):
    """The command line every fixture script takes (--out, --only), float32 matmuls without TF32,
    and the versions printed: shared by this script and make_fixtures_{moe,swa}.py."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--out", required=True, help="folder that receives one folder per model")
    parser.add_argument("--only", nargs="*", help="names of fixtures to build (default: all)")
    args = parser.parse_args()
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    print(f"torch {torch.__version__} transformers {transformers.__version__} "
          f"python {sys.version.split()[0]}")
    os.makedirs(args.out, exist_ok=True)
    return args


def main():
    args = start("Write tests/data-style fixtures.")
    summary = []
    for index, (name, cfg_cls, model_cls, overrides, fmt) in enumerate(spec_list()):
        if args.only and name not in args.only:
            continue
        seed = 1000 + index
        model = build(cfg_cls, model_cls, overrides, seed)
        outdir = os.path.join(args.out, name)
        extra = save_fixture(model, outdir, name)
        if fmt == "old":
            to_old_format(os.path.join(outdir, "config.json"))

        gen = torch.Generator().manual_seed(seed)
        tokens = [int(t) for t in torch.randint(0, VOCAB, (SCORE_LEN,), generator=gen)]
        prompt = [int(t) for t in torch.randint(0, VOCAB, (PROMPT_LEN,), generator=gen)]

        # Everything expected comes from the model as reloaded from disk, so the fixture and
        # the files cannot drift; it must match the in-memory model bit for bit.
        loaded = AutoModelForCausalLM.from_pretrained(outdir, attn_implementation="eager",
                                                      dtype=torch.float32).eval()
        reload_diff = float((logits_of(loaded, tokens) - logits_of(model, tokens)).abs().max())
        assert reload_diff <= 1e-6, f"{name}: reloaded logits differ by {reload_diff}"
        got = dict(loaded.config.rope_parameters)
        for key, value in overrides["rope_parameters"].items():
            assert got.get(key) == value, f"{name}: rope {key}: {got.get(key)} != {value}"

        note = ""
        if overrides["rope_parameters"]["rope_type"] != "default":
            effect = rope_effect(loaded, cfg_cls, model_cls, overrides, tokens)
            note = f"rope scaling moves logits by up to {effect:.3g}"
            if effect < 1e-3:
                note += " WARNING: too small to catch a missing scaling"
        if "sliding_window" in overrides:
            first, rule, late = check_sliding_window(loaded, cfg_cls, overrides, tokens)
            note = f"window first changes pos {first} ({rule}), last-pos diff {late:.3g}"

        greedy, cache_diff, size = record_expected(loaded, outdir, name, fmt, tokens, prompt)
        summary.append((name, size, min(greedy["margins"]), cache_diff, reload_diff, extra, note))
        print(f"{name}: loaded rope_parameters {loaded.config.rope_parameters}")
        print(f"{name}: tensors {tensor_names(os.path.join(outdir, 'model.safetensors'))}")

    print("\nname          bytes    min_margin  cache_diff  reload_diff  removed / notes")
    for name, size, margin, cdiff, rdiff, extra, note in summary:
        print(f"{name:13s} {size:7d}  {margin:10.4g}  {cdiff:10.3g}  {rdiff:11.3g}  {extra} {note}")


if __name__ == "__main__":
    main()
