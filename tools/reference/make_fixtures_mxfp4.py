#!/usr/bin/env python3
# Builds tests/data/gpt_oss_mxfp4: the gpt_oss fixture's mechanisms (make_fixtures_swa.py) with
# experts of width 64 (MXFP4 groups of 32 need input dims divisible by 32) stored as GPT-OSS
# publishes them: `<experts>.gate_up_proj_blocks` uint8 [E, 2I, H/32, 16] and `_scales` uint8
# [E, 2I, H/32], `down_proj_blocks` [E, H, I/32, 16] and `_scales` [E, H, I/32] (e2m1 values two a
# byte, the even element in the low nibble; one e8m0 scale per 32 values, bias 127), biases
# unquantised, and quantization_config {"quant_method": "mxfp4"}. expected.json comes from
# transformers loading that checkpoint itself with Mxfp4Config(dequantize=True), so its reading of
# the format is the oracle; the script also checks that transformers' dequantised experts equal
# the values it quantised to. Needs torch + transformers (GptOss, Mxfp4Config).
import json
import os
import sys

import torch
from safetensors.torch import load_file, save_file
from transformers import AutoModelForCausalLM, Mxfp4Config

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_fixtures as mf  # noqa: E402
import make_fixtures_swa as swa  # noqa: E402

NAME = "gpt_oss_mxfp4"
GROUP = 32
# e2m1 code -> value (sign in bit 3).
E2M1 = torch.tensor([0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0])


def quantize_rows(weight):
    """weight [..., rows, cols] (cols divisible by 32) -> (blocks uint8 [..., rows, cols/32, 16],
    scales uint8 [..., rows, cols/32], the dequantised float32 values). Each group's scale is the
    smallest power of two that brings its largest magnitude to <= 6; values round to the nearest
    e2m1 code (ties to the lower magnitude)."""
    *lead, rows, cols = weight.shape
    groups = weight.reshape(*lead, rows, cols // GROUP, GROUP).float()
    amax = groups.abs().amax(dim=-1, keepdim=True).clamp_min(2.0 ** -126)
    exponent = torch.ceil(torch.log2(amax / 6.0)).clamp(-127, 127)
    scaled = groups / torch.exp2(exponent)
    magnitudes = E2M1[:8]
    codes = (scaled.abs().unsqueeze(-1) - magnitudes).abs().argmin(dim=-1)
    codes = codes + 8 * ((scaled < 0) & (codes > 0)).long()
    values = E2M1[codes] * torch.exp2(exponent)
    packed = (codes[..., 0::2] | (codes[..., 1::2] << 4)).to(torch.uint8)
    scales = (exponent.squeeze(-1) + 127).to(torch.uint8)
    return packed, scales, values.reshape(weight.shape)


def main():
    args = mf.start("Write the MXFP4 GPT-OSS fixture.")
    name, cfg_name, model_name, overrides = next(s for s in swa.spec_list() if s[0] == "gpt_oss")
    overrides = dict(overrides, intermediate_size=64)
    seed = 3100
    model = swa.build(cfg_name, model_name, overrides, seed)
    outdir = os.path.join(args.out, NAME)
    mf.save_fixture(model, outdir, NAME)
    weights_path = os.path.join(outdir, "model.safetensors")
    state = load_file(weights_path)
    quantised = {}
    for key in sorted(state):
        # gate_up_proj [E, H, 2I] and down_proj [E, I, H] are [in, out]; MXFP4 groups run along
        # the input of each output row.
        if key.endswith("experts.gate_up_proj") or key.endswith("experts.down_proj"):
            blocks, scales, values = quantize_rows(state.pop(key).transpose(1, 2).contiguous())
            state[key + "_blocks"], state[key + "_scales"] = blocks, scales
            quantised[key] = values.transpose(1, 2).contiguous()
    save_file(state, weights_path, metadata={"format": "pt"})
    with open(os.path.join(outdir, "config.json")) as f:
        config = json.load(f)
    config["quantization_config"] = {"quant_method": "mxfp4",
                                     "modules_to_not_convert": ["model.layers.*.self_attn", "model.layers.*.mlp.router",
                                                                "model.embed_tokens", "lm_head"]}
    with open(os.path.join(outdir, "config.json"), "w") as f:
        json.dump(config, f, indent=2, sort_keys=True)
        f.write("\n")

    try:
        loaded = AutoModelForCausalLM.from_pretrained(outdir, attn_implementation="eager", dtype=torch.float32,
                                                      quantization_config=Mxfp4Config(dequantize=True),
                                                      **swa.EAGER_EXPERTS[cfg_name]).eval().float()
    except Exception as e:  # noqa: BLE001 - said loudly; the fixture then rests on this script's reading
        print(f"{NAME}: WARNING: transformers could not load the MXFP4 checkpoint ({type(e).__name__}: {e}); "
              "expected.json comes from the unquantised model with this script's dequantised experts")
        loaded = model
        with torch.no_grad():
            for key, values in quantised.items():
                dict(loaded.named_parameters())[key].copy_(values)
    params = dict(loaded.named_parameters())
    for key, values in quantised.items():
        got = params[key].detach().float()
        assert got.shape == values.shape, f"{key}: transformers dequantised {list(got.shape)}, want {list(values.shape)}"
        diff = float((got - values).abs().max())
        assert diff == 0.0, f"{key}: transformers' dequantised experts differ from the quantised values by {diff}"
    print(f"{NAME}: {len(quantised)} expert tensors dequantised to exactly the quantised values")

    gen = torch.Generator().manual_seed(seed)
    tokens = [int(t) for t in torch.randint(0, mf.VOCAB, (mf.SCORE_LEN,), generator=gen)]
    prompt = [int(t) for t in torch.randint(0, mf.VOCAB, (mf.PROMPT_LEN,), generator=gen)]
    reference = swa.build(cfg_name, model_name, overrides, seed)
    unquantised = float((mf.logits_of(loaded, tokens) - mf.logits_of(reference, tokens)).abs().max())
    print(f"{NAME}: MXFP4 moves the logits by {unquantised:.3g} from the unquantised model")
    greedy, cache_diff, size = mf.record_expected(loaded, outdir, NAME, "new", tokens, prompt)
    print(f"{NAME}: {size} bytes, min greedy margin {min(greedy['margins']):.4g}, cache diff {cache_diff:.3g}")


if __name__ == "__main__":
    main()
