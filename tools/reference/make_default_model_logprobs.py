#!/usr/bin/env python3
# The shipped default model's next-token distributions from transformers (float32, CPU), the oracle
# of the fast-path checks (tests/model/test_default_model.cpp, tests/cuda): for each scored
# sequence and position, the TOP_K most likely ids and their log-probs (log_softmax over the whole
# vocabulary), so a test can compute top-1 agreement and the KL divergence over those ids plus one
# bucket for the rest of the vocabulary (never more than the full KL). tests/data/deepinfer_tiny_v3/
# top_logprobs.bin holds per row TOP_K little-endian int32 ids, then their TOP_K float32 log-probs;
# top_logprobs.json indexes it (each sequence's tokens and first row). Needs torch + transformers
# (the GPU machine has both). Usage: tools/reference/make_default_model_logprobs.py
import json
import os

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
MODEL = os.path.join(ROOT, "models", "deepinfer-tiny-v3")
OUT = os.path.join(ROOT, "tests", "data", "deepinfer_tiny_v3")
TOP_K = 256

# Real code of the kind the model was trained on (its own tokenizer encodes it), long enough that
# attention sees more than one KV page, plus the fixture's scored tokens.
CODE = '''import os
import sys


def read_lines(path):
    """Return the lines of a text file without their newlines."""
    with open(path, encoding="utf-8") as f:
        return [line.rstrip("\\n") for line in f]


class Counter:
    def __init__(self):
        self.counts = {}

    def add(self, key, amount=1):
        self.counts[key] = self.counts.get(key, 0) + amount
        return self.counts[key]

    def most_common(self, n=None):
        items = sorted(self.counts.items(), key=lambda kv: kv[1], reverse=True)
        return items if n is None else items[:n]


def main(argv):
    counter = Counter()
    for name in argv[1:]:
        for line in read_lines(name):
            for word in line.split():
                counter.add(word.lower())
    for word, count in counter.most_common(10):
        print(f"{word}: {count}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
'''


def main():
    torch.backends.cuda.matmul.allow_tf32 = False
    with open(os.path.join(OUT, "expected.json")) as f:
        expected = json.load(f)
    tok = AutoTokenizer.from_pretrained(MODEL)
    model = AutoModelForCausalLM.from_pretrained(MODEL, dtype=torch.float32, attn_implementation="eager").eval()
    sequences = [("fixture_score", expected["score"]["tokens"]), ("code", tok(CODE)["input_ids"])]
    rows, index, start = [], [], 0
    with torch.no_grad():
        for name, ids in sequences:
            logits = model(input_ids=torch.tensor([ids]), use_cache=False).logits[0].double()
            top = torch.topk(torch.log_softmax(logits, dim=-1), TOP_K, dim=-1)
            margins = (top.values[:, 0] - top.values[:, 1]).tolist()
            mass = top.values.exp().sum(dim=-1)
            for ids_row, values_row in zip(top.indices.numpy(), top.values.numpy()):
                rows.append(ids_row.astype("<i4").tobytes() + values_row.astype("<f4").tobytes())
            index.append({"name": name, "tokens": ids, "first_row": start, "min_top1_margin": min(margins),
                          "min_top_k_mass": float(mass.min())})
            start += len(ids)
            print(f"{name}: {len(ids)} positions, smallest top-1 margin {min(margins):.4g} nats, "
                  f"smallest top-{TOP_K} mass {float(mass.min()):.4f}")
    with open(os.path.join(OUT, "top_logprobs.bin"), "wb") as f:
        f.write(b"".join(rows))
    meta = {"source": "transformers " + __import__("transformers").__version__ + ", torch " + torch.__version__ +
                      ", float32 on the CPU, eager attention",
            "top_k": TOP_K, "vocab_size": int(model.config.vocab_size), "num_rows": start, "sequences": index}
    with open(os.path.join(OUT, "top_logprobs.json"), "w") as f:
        json.dump(meta, f, indent=1)
        f.write("\n")
    print(f"wrote {start} rows of the top {TOP_K} log-probs")


if __name__ == "__main__":
    main()
