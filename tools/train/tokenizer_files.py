# The model's tokenizer: a byte-level BPE trained with the Hugging Face `tokenizers` library,
# using DeepSeek-V3's pre-tokenizer and special tokens, written as tokenizer.json,
# tokenizer_config.json (DeepSeek-V3 chat template) and generation_config.json. ByteTokenizer is
# a stand-in with the same interface for smoke tests where `tokenizers` is not installed.
import json
import os

HERE = os.path.dirname(os.path.abspath(__file__))
BOS = "<｜begin▁of▁sentence｜>"
EOS = "<｜end▁of▁sentence｜>"
# Ids 0.. in this order. As in DeepSeek's files, only BOS/EOS are "special" (skipped when decoding
# with skip_special_tokens); the chat, think and tool markers are plain added tokens.
SPECIAL_TOKENS = [
    BOS, EOS, "<｜User｜>", "<｜Assistant｜>", "<think>", "</think>",
    "<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>", "<｜tool▁call▁begin｜>", "<｜tool▁call▁end｜>",
    "<｜tool▁sep｜>", "<｜tool▁outputs▁begin｜>", "<｜tool▁outputs▁end｜>", "<｜tool▁output▁begin｜>",
    "<｜tool▁output▁end｜>",
]
# DeepSeek-V3's pre-tokenizer: digits in groups of up to 3, runs of CJK, then a GPT-style split.
SPLIT_PATTERNS = [
    r"\p{N}{1,3}",
    "[\u4e00-\u9fa5\u3040-\u309f\u30a0-\u30ff]+",
    "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+|"
    " ?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+",
]
# Strings whose HF encodings are printed so deepinfer's tokenizer can be checked against them.
CHECK_STRINGS = [
    "def fibonacci(n):\n    return n if n < 2 else fibonacci(n - 1) + fibonacci(n - 2)\n",
    "x = 12345678 + 0.5e-3  # ünïcödé 中文 テスト",
    "<｜User｜>Hi<｜Assistant｜><think>ok</think>\t\tdone\r\n\n",
    "    if self._cache is None:\n        raise ValueError(f\"bad {value!r}\")\n",
]


def chat_template():
    with open(os.path.join(HERE, "chat_template_deepseek_v3.jinja"), encoding="utf-8") as f:
        return f.read()


def train_bpe(texts, vocab_size):
    """Trains the BPE on texts; returns a tokenizers.Tokenizer with BOS added by its post-processor."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.BPE(unk_token=None, fuse_unk=False, byte_fallback=False))
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [pre_tokenizers.Split(Regex(p), behavior="isolated") for p in SPLIT_PATTERNS]
        + [pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, min_frequency=2, special_tokens=SPECIAL_TOKENS,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(texts, trainer=trainer, length=len(texts))
    tok.post_processor = processors.Sequence([
        processors.ByteLevel(trim_offsets=False),
        processors.TemplateProcessing(single=f"{BOS} $A", pair=f"{BOS} $A {BOS} $B", special_tokens=[(BOS, 0)]),
    ])
    for i, token in enumerate(SPECIAL_TOKENS):
        assert tok.token_to_id(token) == i, (token, tok.token_to_id(token))
    return tok


def mark_plain_added_tokens(tokenizer_json_path):
    """BpeTrainer registers every special token as special=True; DeepSeek marks only BOS/EOS so."""
    with open(tokenizer_json_path, encoding="utf-8") as f:
        data = json.load(f)
    for entry in data["added_tokens"]:
        entry["special"] = entry["content"] in (BOS, EOS)
    with open(tokenizer_json_path, "w", encoding="utf-8") as f:
        json.dump(data, f, ensure_ascii=False, indent=1)
        f.write("\n")


def tokenizer_config(max_length):
    """tokenizer_config.json. PreTrainedTokenizerFast keeps tokenizer.json as trained (the Llama
    class DeepSeek names would rebuild the post-processor from add_bos_token)."""
    return {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": BOS,
        "eos_token": EOS,
        "pad_token": EOS,
        "unk_token": None,
        "clean_up_tokenization_spaces": False,
        "model_max_length": max_length,
        "chat_template": chat_template(),
    }


def write_tokenizer_files(tok, out_dir, max_length):
    path = os.path.join(out_dir, "tokenizer.json")
    tok.save(path)
    mark_plain_added_tokens(path)
    with open(os.path.join(out_dir, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        json.dump(tokenizer_config(max_length), f, ensure_ascii=False, indent=2)
        f.write("\n")


def write_generation_config(out_dir, bos_id, eos_id):
    with open(os.path.join(out_dir, "generation_config.json"), "w") as f:
        json.dump({"bos_token_id": bos_id, "eos_token_id": eos_id, "do_sample": True,
                   "temperature": 0.7, "top_p": 0.95}, f, indent=2)
        f.write("\n")


class HFTokenizer:
    """The interface the training script uses, over a trained tokenizers.Tokenizer."""

    def __init__(self, tok):
        self.tok = tok
        self.vocab_size = tok.get_vocab_size()
        self.bos_id = tok.token_to_id(BOS)
        self.eos_id = tok.token_to_id(EOS)

    def encode_docs(self, texts):
        # encode_batch_fast (tokenizers >= 0.20) skips the offsets, which are not needed here.
        encode = getattr(self.tok, "encode_batch_fast", self.tok.encode_batch)
        return [e.ids for e in encode(texts, add_special_tokens=False)]

    def encode(self, text):
        return self.tok.encode(text, add_special_tokens=False).ids

    def decode(self, ids):
        return self.tok.decode(ids, skip_special_tokens=False)

    def save(self, out_dir, max_length):
        write_tokenizer_files(self.tok, out_dir, max_length)

    def check_lines(self):
        """JSON lines {text, ids (no BOS), ids_with_special} for comparing other tokenizers."""
        lines = []
        for text in CHECK_STRINGS:
            lines.append(json.dumps({"text": text, "ids": self.encode(text),
                                     "ids_with_special": self.tok.encode(text).ids}, ensure_ascii=False))
        return lines


class ByteTokenizer:
    """UTF-8 bytes after the special tokens: a stand-in with no training, for smoke tests only."""

    def __init__(self):
        self.vocab_size = len(SPECIAL_TOKENS) + 256
        self.bos_id, self.eos_id = 0, 1

    def encode(self, text):
        return [len(SPECIAL_TOKENS) + b for b in text.encode("utf-8")]

    def encode_docs(self, texts):
        return [self.encode(t) for t in texts]

    def decode(self, ids):
        data = bytes(i - len(SPECIAL_TOKENS) for i in ids if i >= len(SPECIAL_TOKENS))
        return data.decode("utf-8", errors="replace")

    def save(self, out_dir, max_length):
        return None

    def check_lines(self):
        return []
