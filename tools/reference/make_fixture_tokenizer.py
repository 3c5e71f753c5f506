#!/usr/bin/env python3
"""Writes a tokenizer for the gemma3_vision, qwen2_5_vl or qwen3_vl fixture (vocab 397), so `deepinfer serve`
can run the fixture behind the chat APIs: a byte-level BPE without merges over the 256 bytes, the
family's control tokens at the ids the fixture's config names (Gemma 3: <start_of_image> 394,
<end_of_image> 395, <image_soft_token> 396; Qwen2.5-VL and Qwen3-VL: <|vision_start|> 394,
<|vision_end|> 395, <|image_pad|> 396) and its turn markers, and unused added tokens in between. Standard library only;
the tests check it against Hugging Face tokenizers (tests/node).

Usage: python3 tools/reference/make_fixture_tokenizer.py tests/data/gemma3_vision
       python3 tools/reference/make_fixture_tokenizer.py tests/data/qwen2_5_vl
       python3 tools/reference/make_fixture_tokenizer.py tests/data/qwen3_vl
"""
import json
import os
import sys

VOCAB_SIZE = 397
CONTROL = {
    "gemma3_vision": {0: "<pad>", 1: "<eos>", 2: "<bos>", 3: "<unk>", 390: "<start_of_turn>", 391: "<end_of_turn>",
                      394: "<start_of_image>", 395: "<end_of_image>", 396: "<image_soft_token>"},
    "qwen2_5_vl": {0: "<|endoftext|>", 390: "<|im_start|>", 391: "<|im_end|>", 393: "<|video_pad|>",
                   394: "<|vision_start|>", 395: "<|vision_end|>", 396: "<|image_pad|>"},
}
CONTROL["qwen3_vl"] = CONTROL["qwen2_5_vl"]
SPECIAL = {
    "gemma3_vision": {"bos_token": "<bos>", "eos_token": "<eos>", "pad_token": "<pad>", "unk_token": "<unk>",
                      "add_bos_token": False},
    "qwen2_5_vl": {"bos_token": None, "eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"},
}
SPECIAL["qwen3_vl"] = SPECIAL["qwen2_5_vl"]
FIRST_BYTE_ID = 4


def byte_level_alphabet():
    """GPT-2's map of the 256 bytes to printable characters, as the ByteLevel pre-tokenizer uses."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + \
        list(range(ord("®"), ord("ÿ") + 1))
    chars = printable[:]
    extra = 0
    for b in range(256):
        if b not in printable:
            printable.append(b)
            chars.append(256 + extra)
            extra += 1
    return {b: chr(c) for b, c in zip(printable, chars)}


def main():
    out = sys.argv[1]
    fixture = os.path.basename(os.path.normpath(out))
    control = CONTROL[fixture]
    alphabet = byte_level_alphabet()
    vocab = {alphabet[b]: FIRST_BYTE_ID + b for b in range(256)}
    added = []
    for token_id in range(VOCAB_SIZE):
        if FIRST_BYTE_ID <= token_id < FIRST_BYTE_ID + 256:
            continue
        content = control.get(token_id, f"<unused{token_id}>")
        vocab[content] = token_id
        added.append({"id": token_id, "content": content, "single_word": False, "lstrip": False, "rstrip": False,
                      "normalized": False, "special": True})
    byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}
    tokenizer = {
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": added, "normalizer": None,
        "pre_tokenizer": byte_level, "post_processor": None, "decoder": byte_level,
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
                  "vocab": dict(sorted(vocab.items(), key=lambda kv: kv[1])), "merges": []},
    }
    with open(os.path.join(out, "tokenizer.json"), "w") as f:
        json.dump(tokenizer, f, ensure_ascii=False, indent=1)
        f.write("\n")
    config = dict(SPECIAL[fixture], add_eos_token=False, model_max_length=256,
                  tokenizer_class="PreTrainedTokenizerFast")
    with open(os.path.join(out, "tokenizer_config.json"), "w") as f:
        json.dump(config, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
