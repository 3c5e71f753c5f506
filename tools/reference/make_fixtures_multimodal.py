#!/usr/bin/env python3
# Builds the image-input fixtures under tests/data/ (gemma3_vision: Gemma3ForConditionalGeneration
# with a SigLIP tower; qwen2_5_vl: Qwen2_5_VLForConditionalGeneration with its windowed vision
# transformer and M-RoPE; qwen3_vl: Qwen3VLForConditionalGeneration with its interpolated position
# embeddings, DeepStack features and interleaved M-RoPE): tiny random transformers models, one synthetic image each, and what
# transformers computes for them, stage by stage, so an engine can be checked one stage at a time:
#   pixel_values.f32    the image processor's output for image.png (float32, row-major)
#   vision_hidden.f32   the vision tower's last hidden state (before the projector / merger)
#   image_features.f32  the rows that replace the image tokens in the language model's input
#   deepstack_features.f32  qwen3_vl: the rows added to the first decoder layers' outputs
#   expected.json       make_fixtures.py's format over a sequence holding the image's tokens
#   image.json          shapes, token ids, where the image sits, and what each mechanism moves
#   image2.png, pixel_values2.f32, two_images.json  a second image and a prompt holding both: its
#                       logprobs, where each image sits (Qwen: its M-RoPE positions)
# Needs torch + transformers + Pillow; see README.md.
import inspect
import json
import os
import sys
import traceback

import numpy as np
import torch
import transformers
from PIL import Image

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import make_fixtures as mf  # noqa: E402

BOI, EOI, IMAGE = 394, 395, 396  # the last ids of the 397-token vocabulary
TEXT_IDS = 394  # text tokens are drawn below the image markers


def synthetic_image(width, height, seed):
    """Smooth gradients plus noise: every patch differs, and resizing would show."""
    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:height, 0:width]
    rgb = np.stack([255 * x / max(width - 1, 1), 255 * y / max(height - 1, 1),
                    127 + 100 * np.sin((x + 2 * y) / 5.0)], axis=-1)
    rgb = rgb + rng.normal(0, 20, rgb.shape)
    return Image.fromarray(np.clip(rgb, 0, 255).astype(np.uint8), "RGB")


def normalised(image, mean, std):
    """Channels-first float32 (x / 255 - mean) / std, as the processors compute it."""
    rescaled = (np.asarray(image).astype(np.float64) * (1 / 255)).astype(np.float32)
    return ((rescaled - np.array(mean, dtype=np.float32)) / np.array(std, dtype=np.float32)).transpose(2, 0, 1)


def qwen2_vl_patches(image, patch=14, temporal=2, merge=2):
    """Qwen2VLImageProcessor's patch rows for an image whose sides are already multiples of 28."""
    pixels = normalised(image, [0.48145466, 0.4578275, 0.40821073], [0.26862954, 0.26130258, 0.27577711])
    grid_h, grid_w = pixels.shape[1] // patch, pixels.shape[2] // patch
    patches = np.tile(pixels[None], (temporal, 1, 1, 1))
    patches = patches.reshape(1, temporal, 3, grid_h // merge, merge, patch, grid_w // merge, merge, patch)
    patches = patches.transpose(0, 3, 6, 4, 7, 2, 1, 5, 8).reshape(grid_h * grid_w, 3 * temporal * patch * patch)
    return torch.from_numpy(np.ascontiguousarray(patches)), torch.tensor([[1, grid_h, grid_w]])


def write_f32(path, tensor):
    array = tensor.detach().to(torch.float32).contiguous().numpy()
    array.tofile(path)
    return list(array.shape)


def reinit(model, seed):
    """Every weight matters numerically: Gemma's (1 + w) RMSNorms 0.2 N(0,1), other RMSNorms and
    LayerNorm weights 1 + 0.2 N(0,1), LayerNorm biases 0.05 N(0,1), position embeddings 0.5 N(0,1)
    (they must not vanish beside the patch values), the image projection 0.2 N(0,1), the rest
    0.05 N(0,1)."""
    gen = torch.Generator().manual_seed(seed)
    done = set()
    with torch.no_grad():
        for module in model.modules():
            kind = type(module).__name__
            if isinstance(module, torch.nn.LayerNorm):
                module.weight.copy_(1.0 + 0.2 * torch.randn(module.weight.shape, generator=gen))
                module.bias.copy_(0.05 * torch.randn(module.bias.shape, generator=gen))
            elif "RMSNorm" in kind:
                base = 0.0 if kind.startswith("Gemma") else 1.0
                module.weight.copy_(base + 0.2 * torch.randn(module.weight.shape, generator=gen))
            else:
                continue
            done.update(id(p) for p in module.parameters(recurse=False))
        for name, param in model.named_parameters():
            if id(param) in done:
                continue
            if "position_embedding" in name or "pos_embed" in name:
                scale = 0.5
            elif "mm_input_projection" in name:
                scale = 0.2
            else:
                scale = 0.05
            param.copy_(scale * torch.randn(param.shape, generator=gen))


def score_section(logits, tokens):
    logprobs = torch.log_softmax(logits.double(), dim=-1)
    top = torch.topk(logprobs, mf.TOP_K, dim=-1)
    return {"tokens": tokens, "top_k": mf.TOP_K,
            "positions": [{"pos": i, "token": tokens[i],
                           "top": [[int(t), float(v)] for v, t in zip(top.values[i], top.indices[i])]}
                          for i in range(len(tokens))]}


def greedy_section(model, prompt, image_inputs, full_logits_of):
    gen_cfg = transformers.GenerationConfig(do_sample=False, max_new_tokens=mf.NEW_TOKENS,
                                            min_new_tokens=mf.NEW_TOKENS, eos_token_id=None, pad_token_id=None,
                                            bos_token_id=None, output_logits=True, return_dict_in_generate=True)
    with torch.no_grad():
        out = model.generate(input_ids=torch.tensor([prompt]), attention_mask=torch.ones(1, len(prompt), dtype=torch.long),
                             generation_config=gen_cfg, **image_inputs(len(prompt)))
    new = [int(t) for t in out.sequences[0, len(prompt):]]
    assert len(new) == mf.NEW_TOKENS, new
    step_logits = torch.stack([l[0].float() for l in out.logits])
    margins = [float(torch.topk(row, 2).values[0] - torch.topk(row, 2).values[1]) for row in step_logits.double()]
    full = full_logits_of(prompt + new[:-1])[len(prompt) - 1:]
    diff = float((full - step_logits).abs().max())
    assert diff < 1e-4, f"cached vs full logits differ by {diff}"
    return {"prompt": prompt, "max_tokens": mf.NEW_TOKENS, "tokens": new, "margins": margins}, diff


def text_tokens(gen, count):
    return [int(t) for t in torch.randint(0, TEXT_IDS, (count,), generator=gen)]


def guarded(build_two_images):
    """The two-image part's record, or its error: a failure there must not cost the fixture its
    image.json (main reports it and exits non-zero)."""
    try:
        return build_two_images()
    except Exception as e:  # reported by main after image.json is written
        traceback.print_exc()
        return {"error": f"{type(e).__name__}: {e}"}


def saved_model(model_class, config, out, name, seed):
    """A random model_class of config, saved as the fixture out/name and loaded back in float32 (what
    the engine reads); returns the fixture's directory and the loaded model."""
    torch.manual_seed(seed)
    model = model_class._from_config(config, attn_implementation="eager")
    reinit(model, seed)
    model.eval()
    outdir = os.path.join(out, name)
    mf.save_fixture(model, outdir, name)
    return outdir, model_class.from_pretrained(outdir, attn_implementation="eager", dtype=torch.float32).eval()


def two_image_prompt(seed, first_run, second_run):
    """A prompt holding two images (issue 28's second fixture prompt): 4 text tokens, the fixture's
    image, 3 text tokens, image2.png, text up to SCORE_LEN; returns it and the images' token spans."""
    gen = torch.Generator().manual_seed(seed + 1000)  # its own stream: the other prompts stay as they were
    first_text = text_tokens(gen, 4)
    mid = text_tokens(gen, 3)
    tokens = first_text + first_run + mid + second_run
    tokens += text_tokens(gen, mf.SCORE_LEN - len(tokens))
    a0 = len(first_text) + 1
    b0 = len(first_text) + len(first_run) + len(mid) + 1
    return tokens, [[a0, a0 + len(first_run) - 2], [b0, b0 + len(second_run) - 2]]


def write_two_images(outdir, tokens, spans, logits, blank_second_logits, extra):
    """two_images.json: the two-image prompt's logprobs (score_section's format), where each image
    sits, and how far blanking the second image moves the logits (the check that it is read)."""
    moved = float((logits - blank_second_logits).abs().max())
    assert moved > 1e-3, f"the second image moves the logits by only {moved}"
    record = {"image_tokens": spans, "second_image": "image2.png", "second_pixel_values": "pixel_values2.f32",
              "second_image_moves_logits_by": moved, "score": score_section(logits, tokens)}
    record.update(extra)
    with open(os.path.join(outdir, "two_images.json"), "w") as f:
        json.dump(record, f, indent=1)
        f.write("\n")
    return {"spans": spans, "second_image_moves_logits_by": moved}


def qwen_two_images(loaded, outdir, seed, first, second_image, process, takes_types=True):
    """The two-image prompt on a Qwen-VL model: first = (pixel_values, grid, merged tokens) of the
    fixture's image, process(image) -> (pixel_values, grid) for image2.png; also the M-RoPE positions
    get_rope_index gives the prompt."""
    second_image.save(os.path.join(outdir, "image2.png"))
    values, grid = process(second_image)
    merged = int(grid[0].prod()) // 4
    tokens, spans = two_image_prompt(seed, [BOI] + [IMAGE] * first[2] + [EOI], [BOI] + [IMAGE] * merged + [EOI])
    grids = torch.cat([first[1], grid])
    types = torch.zeros(1, len(tokens), dtype=torch.long)
    for begin, end in spans:
        types[0, begin:end] = 1
    extra_inputs = {"image_grid_thw": grids}
    if takes_types:
        extra_inputs["mm_token_type_ids"] = types

    def logits_with(second_values):
        with torch.no_grad():
            return loaded(input_ids=torch.tensor([tokens]), use_cache=False,
                          pixel_values=torch.cat([first[0], second_values]), **extra_inputs).logits[0].float()

    with torch.no_grad():
        position_ids, _ = loaded.model.get_rope_index(input_ids=torch.tensor([tokens]),
                                                       attention_mask=torch.ones(1, len(tokens), dtype=torch.long),
                                                       **extra_inputs)
    extra = {"second_image_grid_thw": [int(v) for v in grid[0]],
             "second_pixel_values_shape": write_f32(os.path.join(outdir, "pixel_values2.f32"), values),
             "position_ids": [[int(v) for v in row[0]] for row in position_ids]}
    return write_two_images(outdir, tokens, spans, logits_with(values), logits_with(values * 0), extra)


def gemma3_vision(out, seed):
    """SigLIP 56 x 56 in 14-pixel patches (16 patches, 2 layers of width 32), pooled 2 x 2 into 4
    image tokens; the Gemma 3 text model of make_fixtures_swa.py's gemma3."""
    name = "gemma3_vision"
    text = dict(mf.COMMON)
    text.update(head_dim=16, sliding_window=8, layer_types=["sliding_attention", "full_attention"],
                query_pre_attn_scalar=24, final_logit_softcapping=2.0, attn_logit_softcapping=None,
                hidden_activation="gelu_pytorch_tanh", tie_word_embeddings=True,
                rope_parameters={"sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
                                 "full_attention": {"rope_type": "linear", "rope_theta": 1000000.0, "factor": 2.0}})
    vision = dict(hidden_size=32, intermediate_size=37, num_hidden_layers=2, num_attention_heads=2, num_channels=3,
                  image_size=56, patch_size=14, hidden_act="gelu_pytorch_tanh", layer_norm_eps=1e-6,
                  vision_use_head=False)
    config = transformers.Gemma3Config(text_config=text, vision_config=vision, mm_tokens_per_image=4,
                                       boi_token_index=BOI, eoi_token_index=EOI, image_token_index=IMAGE,
                                       tie_word_embeddings=True)
    outdir, loaded = saved_model(transformers.Gemma3ForConditionalGeneration, config, out, name, seed)

    image = synthetic_image(56, 56, seed)
    image.save(os.path.join(outdir, "image.png"))
    # At the model's own size the processor's resize keeps every pixel, so its output is the
    # rescaled, normalised image whichever processor class this transformers has.
    try:
        processor = transformers.Gemma3ImageProcessor(size={"height": 56, "width": 56}, do_pan_and_scan=False)
        pixel_values = processor(images=[image], return_tensors="pt")["pixel_values"].to(torch.float32)
        made_by = "transformers Gemma3ImageProcessor"
    except Exception as e:
        print(f"{name}: Gemma3ImageProcessor unavailable ({type(e).__name__}: {e}); numpy")
        pixel_values = torch.from_numpy(normalised(image, [0.5] * 3, [0.5] * 3)[None])
        made_by = "numpy (no resize at 56 x 56)"
    info = {"pixel_values_shape": write_f32(os.path.join(outdir, "pixel_values.f32"), pixel_values[0]),
            "processor": {"size": [56, 56], "resample": "bilinear", "rescale": 1 / 255,
                          "mean": [0.5] * 3, "std": [0.5] * 3, "made_by": made_by}}

    with torch.no_grad():
        tower = loaded.model.vision_tower(pixel_values=pixel_values).last_hidden_state
        features = loaded.model.get_image_features(pixel_values)
        if not torch.is_tensor(features):
            features = features.pooler_output if hasattr(features, "pooler_output") else features[0]
    info["vision_hidden_shape"] = write_f32(os.path.join(outdir, "vision_hidden.f32"), tower[0])
    info["image_features_shape"] = write_f32(os.path.join(outdir, "image_features.f32"), features.reshape(-1, 64))

    gen = torch.Generator().manual_seed(seed)
    before = text_tokens(gen, 6)
    image_run = [BOI] + [IMAGE] * 4 + [EOI]
    tokens = before + image_run + text_tokens(gen, mf.SCORE_LEN - 12)
    image_span = [len(before) + 1, len(before) + 5]

    def inputs(length, with_types=True):
        extra = {"pixel_values": pixel_values}
        if with_types:
            types = torch.zeros(1, length, dtype=torch.long)
            types[0, image_span[0]:image_span[1]] = 1
            extra["token_type_ids"] = types
        return extra

    def logits_of(ids, with_types=True):
        with torch.no_grad():
            return loaded(input_ids=torch.tensor([ids]), use_cache=False, **inputs(len(ids), with_types)).logits[0].float()

    logits = logits_of(tokens)
    causal_only = float((logits - logits_of(tokens, with_types=False)).abs().max())
    blank = pixel_values * 0
    with torch.no_grad():
        no_image = loaded(input_ids=torch.tensor([tokens]), use_cache=False, pixel_values=blank,
                          token_type_ids=inputs(len(tokens))["token_type_ids"]).logits[0].float()
    image_moves = float((logits - no_image).abs().max())
    prompt = tokens[:12]
    greedy, cache_diff = greedy_section(loaded, prompt, inputs, logits_of)
    mf.write_expected(os.path.join(outdir, "expected.json"),
                      {"name": name, "architecture": "Gemma3ForConditionalGeneration", "config_format": "new",
                       "score": score_section(logits, tokens), "greedy": greedy})
    info.update(image_token_id=IMAGE, boi_token_id=BOI, eoi_token_id=EOI, image_tokens=[image_span],
                token_type_ids="1 on the image tokens, given to every forward (bidirectional attention inside the image)",
                bidirectional_moves_logits_by=causal_only, blank_image_moves_logits_by=image_moves,
                cached_vs_full=cache_diff)

    def two_images():
        second = synthetic_image(56, 56, seed + 1000)
        second.save(os.path.join(outdir, "image2.png"))
        if made_by.startswith("transformers"):
            second_values = processor(images=[second], return_tensors="pt")["pixel_values"].to(torch.float32)
        else:
            second_values = torch.from_numpy(normalised(second, [0.5] * 3, [0.5] * 3)[None])
        two, spans = two_image_prompt(seed, image_run, image_run)
        two_types = torch.zeros(1, len(two), dtype=torch.long)
        for begin, end in spans:
            two_types[0, begin:end] = 1

        def two_logits(values):
            with torch.no_grad():
                return loaded(input_ids=torch.tensor([two]), use_cache=False,
                              pixel_values=torch.cat([pixel_values, values]), token_type_ids=two_types).logits[0].float()

        return write_two_images(
            outdir, two, spans, two_logits(second_values), two_logits(second_values * 0),
            {"second_pixel_values_shape": write_f32(os.path.join(outdir, "pixel_values2.f32"), second_values[0])})

    info["two_images"] = guarded(two_images)
    return name, outdir, info


def qwen2_5_vl(out, seed):
    """A 56 x 84 image: 4 x 6 patches of 14 (temporal patch 2: the image repeated), merged 2 x 2 into
    6 tokens; windows of 56 pixels (2 x 2 merged tokens: one full window and one of 2 x 1) on vision
    block 0, full attention on block 1; M-RoPE sections [2, 3, 3] in the text model."""
    name = "qwen2_5_vl"
    text = dict(mf.COMMON)
    text.update(rope_parameters={"rope_type": "default", "rope_theta": 1000000.0, "mrope_section": [2, 3, 3]})
    vision = dict(depth=2, hidden_size=32, intermediate_size=37, num_heads=2, in_channels=3, patch_size=14,
                  spatial_merge_size=2, temporal_patch_size=2, window_size=56, fullatt_block_indexes=[1],
                  out_hidden_size=64, hidden_act="silu")
    config = transformers.Qwen2_5_VLConfig(text_config=text, vision_config=vision, image_token_id=IMAGE,
                                           vision_start_token_id=BOI, vision_end_token_id=EOI, video_token_id=393)
    outdir, loaded = saved_model(transformers.Qwen2_5_VLForConditionalGeneration, config, out, name, seed)

    image = synthetic_image(84, 56, seed)
    image.save(os.path.join(outdir, "image.png"))
    try:
        processor = transformers.Qwen2VLImageProcessor(min_pixels=56 * 56, max_pixels=28 * 28 * 64)
        processed = processor(images=[image], return_tensors="pt")
        pixel_values = processed["pixel_values"].to(torch.float32)
        grid = processed["image_grid_thw"]
        made_by = "transformers Qwen2VLImageProcessor"
    except Exception as e:
        print(f"{name}: Qwen2VLImageProcessor unavailable ({type(e).__name__}: {e}); numpy")
        pixel_values, grid = qwen2_vl_patches(image)
        made_by = "numpy (no resize at 56 x 84)"
    info = {"pixel_values_shape": write_f32(os.path.join(outdir, "pixel_values.f32"), pixel_values),
            "image_grid_thw": [int(v) for v in grid[0]],
            "processor": {"min_pixels": 56 * 56, "max_pixels": 28 * 28 * 64, "made_by": made_by}}
    merged = int(grid[0].prod()) // 4

    with torch.no_grad():
        features = loaded.model.get_image_features(pixel_values, grid)
        if not torch.is_tensor(features):
            features = features.pooler_output if hasattr(features, "pooler_output") else features[0]
        if isinstance(features, (list, tuple)):
            features = torch.cat(list(features))
    info["image_features_shape"] = write_f32(os.path.join(outdir, "image_features.f32"), features.reshape(merged, 64))

    gen = torch.Generator().manual_seed(seed)
    before = text_tokens(gen, 6)
    image_run = [BOI] + [IMAGE] * merged + [EOI]
    tokens = before + image_run + text_tokens(gen, mf.SCORE_LEN - len(before) - len(image_run))
    image_span = [len(before) + 1, len(before) + 1 + merged]

    def inputs(length, with_types=True):
        # transformers 5 places the image's M-RoPE positions only where mm_token_type_ids marks
        # it; without them every rope section gets the 1D positions.
        types = torch.zeros(1, length, dtype=torch.long)
        types[0, image_span[0]:image_span[1]] = 1
        return {"pixel_values": pixel_values, "image_grid_thw": grid, "mm_token_type_ids": types}

    def logits_of(ids, with_types=True):
        with torch.no_grad():
            return loaded(input_ids=torch.tensor([ids]), use_cache=False, **inputs(len(ids))).logits[0].float()

    logits = logits_of(tokens)
    # The positions an engine must give the text model (3 rows: temporal, height, width); the image
    # must shift them, or the fixture does not test M-RoPE.
    with torch.no_grad():
        position_ids, delta = loaded.model.get_rope_index(
            input_ids=torch.tensor([tokens]), mm_token_type_ids=inputs(len(tokens))["mm_token_type_ids"],
            image_grid_thw=grid, attention_mask=torch.ones(1, len(tokens), dtype=torch.long))
    info["position_ids"] = [[int(v) for v in row[0]] for row in position_ids]
    info["rope_deltas"] = int(delta.reshape(-1)[0])
    assert info["rope_deltas"] != 0, "the image's positions are 1D: M-RoPE is not exercised"
    with torch.no_grad():
        blank_inputs = dict(inputs(len(tokens)), pixel_values=pixel_values * 0)
        blank = loaded(input_ids=torch.tensor([tokens]), use_cache=False, **blank_inputs).logits[0].float()
    prompt = tokens[:image_span[1] + 1]
    greedy, cache_diff = greedy_section(loaded, prompt, inputs, logits_of)
    mf.write_expected(os.path.join(outdir, "expected.json"),
                      {"name": name, "architecture": "Qwen2_5_VLForConditionalGeneration", "config_format": "new",
                       "score": score_section(logits, tokens), "greedy": greedy})
    info.update(image_token_id=IMAGE, vision_start_token_id=BOI, vision_end_token_id=EOI, image_tokens=[image_span],
                blank_image_moves_logits_by=float((logits - blank).abs().max()), cached_vs_full=cache_diff)

    def process(image):
        if made_by.startswith("transformers"):
            processed2 = processor(images=[image], return_tensors="pt")
            return processed2["pixel_values"].to(torch.float32), processed2["image_grid_thw"]
        return qwen2_vl_patches(image)

    # A 56 x 56 second image: 4 x 4 patches, 4 tokens.
    info["two_images"] = guarded(lambda: qwen_two_images(loaded, outdir, seed, (pixel_values, grid, merged),
                                                         synthetic_image(56, 56, seed + 1000), process))
    return name, outdir, info


def image_features_of(model, pixel_values, grid):
    """The vision side's rows (and Qwen3-VL's DeepStack rows) whatever this transformers returns."""
    with torch.no_grad():
        out = model.model.get_image_features(pixel_values, grid)
    deepstack = None
    if isinstance(out, tuple):
        out, deepstack = out[0], out[1]
    elif not torch.is_tensor(out):
        deepstack = getattr(out, "deepstack_features", None)
        out = out.pooler_output if getattr(out, "pooler_output", None) is not None else out[0]
    if isinstance(out, (list, tuple)):
        out = torch.cat(list(out))
    return out, deepstack


def qwen3_vl(out, seed):
    """A 96 x 64 image: 6 x 4 patches of 16 (temporal patch 2), merged 2 x 2 into 6 tokens; position
    embeddings of a 4 x 4 grid interpolated to it; DeepStack features from vision blocks 0 and 2
    added after text layers 0 and 1; interleaved M-RoPE sections [2, 3, 3]; q/k norms."""
    name = "qwen3_vl"
    text = dict(mf.COMMON)
    text.update(head_dim=16, rope_parameters={"rope_type": "default", "rope_theta": 5000000.0,
                                              "mrope_section": [2, 3, 3], "mrope_interleaved": True})
    vision = dict(depth=3, hidden_size=32, intermediate_size=37, num_heads=2, in_channels=3, patch_size=16,
                  spatial_merge_size=2, temporal_patch_size=2, out_hidden_size=64, hidden_act="gelu_pytorch_tanh",
                  num_position_embeddings=16, deepstack_visual_indexes=[0, 2])
    config = transformers.Qwen3VLConfig(text_config=text, vision_config=vision, image_token_id=IMAGE,
                                        vision_start_token_id=BOI, vision_end_token_id=EOI, video_token_id=393,
                                        tie_word_embeddings=False)
    outdir, loaded = saved_model(transformers.Qwen3VLForConditionalGeneration, config, out, name, seed)

    image = synthetic_image(96, 64, seed)
    image.save(os.path.join(outdir, "image.png"))
    bounds = {"shortest_edge": 64 * 64, "longest_edge": 32 * 32 * 64}
    processor = transformers.Qwen2VLImageProcessor(patch_size=16, merge_size=2, temporal_patch_size=2,
                                                   image_mean=[0.5] * 3, image_std=[0.5] * 3, size=bounds)
    processor.save_pretrained(outdir)  # preprocessor_config.json: the engine reads its bounds, mean and std
    processed = processor(images=[image], return_tensors="pt")
    pixel_values = processed["pixel_values"].to(torch.float32)
    grid = processed["image_grid_thw"]
    info = {"pixel_values_shape": write_f32(os.path.join(outdir, "pixel_values.f32"), pixel_values),
            "image_grid_thw": [int(v) for v in grid[0]],
            "processor": {"size": bounds, "mean": [0.5] * 3, "std": [0.5] * 3, "patch_size": 16,
                          "made_by": f"transformers {type(processor).__name__}"}}
    merged = int(grid[0].prod()) // 4
    features, deepstack = image_features_of(loaded, pixel_values, grid)
    info["image_features_shape"] = write_f32(os.path.join(outdir, "image_features.f32"), features.reshape(merged, 64))
    assert deepstack is not None and len(deepstack) == 2, f"DeepStack features: {type(deepstack)}"
    info["deepstack_features_shape"] = write_f32(os.path.join(outdir, "deepstack_features.f32"),
                                                 torch.stack([d.reshape(merged, 64) for d in deepstack]))

    gen = torch.Generator().manual_seed(seed)
    before = text_tokens(gen, 6)
    image_run = [BOI] + [IMAGE] * merged + [EOI]
    tokens = before + image_run + text_tokens(gen, mf.SCORE_LEN - len(before) - len(image_run))
    image_span = [len(before) + 1, len(before) + 1 + merged]
    takes_types = "mm_token_type_ids" in inspect.signature(loaded.model.get_rope_index).parameters

    def inputs(length, with_types=True):
        extra = {"pixel_values": pixel_values, "image_grid_thw": grid}
        if takes_types:
            types = torch.zeros(1, length, dtype=torch.long)
            types[0, image_span[0]:image_span[1]] = 1
            extra["mm_token_type_ids"] = types
        return extra

    def logits_of(ids, with_types=True):
        with torch.no_grad():
            return loaded(input_ids=torch.tensor([ids]), use_cache=False, **inputs(len(ids))).logits[0].float()

    logits = logits_of(tokens)
    rope_inputs = {k: v for k, v in inputs(len(tokens)).items() if k != "pixel_values"}
    with torch.no_grad():
        position_ids, delta = loaded.model.get_rope_index(
            input_ids=torch.tensor([tokens]), attention_mask=torch.ones(1, len(tokens), dtype=torch.long),
            **rope_inputs)
    info["position_ids"] = [[int(v) for v in row[0]] for row in position_ids]
    info["rope_deltas"] = int(delta.reshape(-1)[0])
    assert info["rope_deltas"] != 0, "the image's positions are 1D: M-RoPE is not exercised"
    with torch.no_grad():
        blank_inputs = dict(inputs(len(tokens)), pixel_values=pixel_values * 0)
        blank = loaded(input_ids=torch.tensor([tokens]), use_cache=False, **blank_inputs).logits[0].float()
        # DeepStack's share: the same main rows without the rows added to the decoder layers.
        saved = loaded.model.visual.deepstack_visual_indexes
        loaded.model.visual.deepstack_visual_indexes = []
        try:
            no_deepstack = loaded(input_ids=torch.tensor([tokens]), use_cache=False,
                                  **inputs(len(tokens))).logits[0].float()
            deepstack_moves = float((logits - no_deepstack).abs().max())
        except Exception as e:  # a transformers that zips the layers and features
            print(f"{name}: logits without DeepStack unavailable ({type(e).__name__}: {e})")
            deepstack_moves = None
        loaded.model.visual.deepstack_visual_indexes = saved
    prompt = tokens[:image_span[1] + 1]
    greedy, cache_diff = greedy_section(loaded, prompt, inputs, logits_of)
    mf.write_expected(os.path.join(outdir, "expected.json"),
                      {"name": name, "architecture": "Qwen3VLForConditionalGeneration", "config_format": "new",
                       "score": score_section(logits, tokens), "greedy": greedy})
    info.update(image_token_id=IMAGE, vision_start_token_id=BOI, vision_end_token_id=EOI, image_tokens=[image_span],
                blank_image_moves_logits_by=float((logits - blank).abs().max()),
                deepstack_moves_logits_by=deepstack_moves, mm_token_type_ids=takes_types, cached_vs_full=cache_diff)

    def process(image):
        processed2 = processor(images=[image], return_tensors="pt")
        return processed2["pixel_values"].to(torch.float32), processed2["image_grid_thw"]

    # A 64 x 64 second image: 4 x 4 patches of 16, 4 tokens.
    info["two_images"] = guarded(lambda: qwen_two_images(loaded, outdir, seed, (pixel_values, grid, merged),
                                                         synthetic_image(64, 64, seed + 1000), process, takes_types))
    return name, outdir, info


def main():
    args = mf.start("Write the image-input fixtures.")
    failed = False
    for index, build in enumerate((gemma3_vision, qwen2_5_vl, qwen3_vl)):
        if args.only and build.__name__ not in args.only:
            continue
        try:
            name, outdir, info = build(args.out, 5000 + index)
        except Exception:  # one fixture's failure must not hide the other's result
            traceback.print_exc()
            failed = True
            continue
        with open(os.path.join(outdir, "image.json"), "w") as f:
            json.dump(info, f, indent=1, sort_keys=True)
            f.write("\n")
        if "error" in info.get("two_images", {}):
            print(f"{name}: the two-image prompt failed: {info['two_images']['error']}")
            failed = True
        sizes = {f: os.path.getsize(os.path.join(outdir, f)) for f in sorted(os.listdir(outdir))}
        print(f"{name}: {json.dumps(info, sort_keys=True)}\n{name}: files {sizes}")
        print(f"{name}: tensors {mf.tensor_names(os.path.join(outdir, 'model.safetensors'))}")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
