#!/usr/bin/env python3
# Trains deepinfer's embedded default model end to end on one GPU: corpus from permissively
# licensed Python sources on the machine, byte-level BPE tokenizer, a ~14M-parameter DeepSeek-V3
# model (MLA, MoE, MTP, confidence head), evaluation, a Hugging Face checkpoint, checks with
# transformers and the engine-test fixtures. See README.md beside this file.
import argparse
import json
import os
import platform
import random
import sys
import time

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import checkpoint  # noqa: E402
import corpus  # noqa: E402
import tokenizer_files  # noqa: E402
from model import DeepSeekV3, ModelConfig, count_saved_parameters  # noqa: E402
from trainer import TrainConfig, evaluate, pack, train, unigram_log_probs  # noqa: E402

MODEL_NAME = "deepinfer-tiny-v3"
MAX_PARAMETERS = 15_000_000
MAX_SHARD_BYTES = 14 * 1024 * 1024  # what comes back from the GPU machine: files under 16 MiB


def settings(smoke):
    """(model config without vocab, train config, corpus bytes, bytes for BPE training, vocab,
    seconds kept after training for evaluation, saving and checks)."""
    if smoke:
        model = ModelConfig(hidden_size=64, intermediate_size=128, moe_intermediate_size=32, num_hidden_layers=2,
                            num_attention_heads=2, q_lora_rank=32, kv_lora_rank=16, qk_nope_head_dim=16,
                            qk_rope_head_dim=8, v_head_dim=16, max_position_embeddings=512)
        run = TrainConfig(seq_len=128, batch_size=16, warmup_steps=10, max_steps=300, eval_chunks=32,
                          log_every_s=5.0)
        return model, run, 3_000_000, 3_000_000, 1024, 30.0
    return ModelConfig(), TrainConfig(), 120_000_000, 30_000_000, 8192, 60.0


def main():
    parser = argparse.ArgumentParser(description="Train the embedded default model (issue 8).")
    parser.add_argument("--out", required=True, help="output directory (the Hugging Face model directory)")
    parser.add_argument("--minutes", type=float, default=8.0, help="wall-clock budget for the whole script")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--smoke", action="store_true", help="tiny sizes: the whole pipeline in under a minute")
    parser.add_argument("--byte-tokenizer", action="store_true",
                        help="UTF-8 byte stand-in tokenizer (no `tokenizers` needed); for local smoke tests")
    args = parser.parse_args()

    start = time.time()
    timings = {}

    def log(message):
        print(f"[{time.time() - start:7.1f}s] {message}", flush=True)

    def phase(name, since):
        timings[name] = round(time.time() - since, 2)
        return time.time()

    random.seed(args.seed)
    torch.manual_seed(args.seed)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    os.makedirs(args.out, exist_ok=True)
    model_cfg, run_cfg, corpus_bytes, bpe_bytes, vocab_size, reserve_s = settings(args.smoke)
    log(f"python {platform.python_version()} torch {torch.__version__} device "
        f"{torch.cuda.get_device_name() if device.type == 'cuda' else 'cpu'}")

    t = time.time()
    train_texts, val_texts, licences = corpus.build_corpus(corpus_bytes, corpus_bytes // 4, 0.02, args.seed)
    log(f"corpus: {licences['files']} files, {licences['total_bytes'] / 1e6:.1f} MB from "
        f"{len(licences['sources'])} sources; {len(val_texts)} validation files")
    with open(os.path.join(args.out, "corpus_licences.json"), "w") as f:
        json.dump(licences, f, indent=1)
        f.write("\n")
    t = phase("corpus_s", t)

    if args.byte_tokenizer:
        tok = tokenizer_files.ByteTokenizer()
    else:
        sample, size = [], 0
        for text in train_texts:
            if size >= bpe_bytes:
                break
            sample.append(text)
            size += len(text)
        tok = tokenizer_files.HFTokenizer(tokenizer_files.train_bpe(sample, vocab_size))
    log(f"tokenizer: vocab {tok.vocab_size}")
    t = phase("tokenizer_s", t)
    train_stream = pack(tok.encode_docs(train_texts), tok.bos_id, tok.eos_id)
    val_stream = pack(tok.encode_docs(val_texts), tok.bos_id, tok.eos_id)
    val_bytes = sum(len(x.encode()) for x in val_texts)
    log(f"tokens: train {train_stream.numel()}, val {val_stream.numel()} "
        f"({val_bytes / max(1, val_stream.numel()):.2f} bytes/token on val)")
    unigram = unigram_log_probs(train_stream, tok.vocab_size)
    t = phase("encode_s", t)

    model_cfg.vocab_size = tok.vocab_size
    saved_params = count_saved_parameters(model_cfg)
    model = DeepSeekV3(model_cfg).to(device)
    trained_params = sum(p.numel() for p in model.parameters())
    log(f"model: {trained_params} trained parameters, {saved_params} in the checkpoint")
    if not args.smoke:
        assert saved_params <= MAX_PARAMETERS, saved_params

    seconds = args.minutes * 60 - (time.time() - start) - reserve_s
    if args.smoke:
        seconds = min(seconds, 15.0)
    log(f"training for {seconds:.0f} s (at most {run_cfg.max_steps} steps)")
    summary = train(model, train_stream, run_cfg, device, seconds, args.seed, log)
    t = phase("train_s", t)

    # Evaluate and check exactly what is shipped: the bf16-rounded weights.
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(p.to(torch.bfloat16).float())
    figures = evaluate(model, val_stream, unigram, run_cfg, device, batch_size=32)
    log("validation: " + ", ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}"
                                   for k, v in figures.items()))
    t = phase("eval_s", t)

    tensors = checkpoint.hf_tensors(model)
    shards = checkpoint.save_sharded(args.out, tensors, MAX_SHARD_BYTES)
    with open(os.path.join(args.out, "config.json"), "w") as f:
        json.dump(checkpoint.hf_config(model_cfg, tok.bos_id, tok.eos_id), f, indent=2)
        f.write("\n")
    tok.save(args.out, model_cfg.max_position_embeddings)
    tokenizer_files.write_generation_config(args.out, tok.bos_id, tok.eos_id)
    log(f"saved {len(tensors)} tensors in {shards}")

    reloaded = DeepSeekV3(model_cfg).to(device)
    checkpoint.load_hf_tensors(reloaded, checkpoint.load_sharded(args.out))
    batch = val_stream[: 4 * run_cfg.seq_len].view(4, run_cfg.seq_len).long().to(device)
    with torch.no_grad():
        a, am, ac = model(batch)
        b, bm, bc = reloaded(batch)
    reload_diff = max(float((a - b).abs().max()), float((am - bm).abs().max()), float((ac - bc).abs().max()))
    log(f"reloaded checkpoint vs training model (main, MTP, confidence): max diff {reload_diff:.3g}")
    del reloaded
    t = phase("save_s", t)

    tok_lines = tok.check_lines()
    for line in tok_lines:
        print("HF_TOKENIZER " + line)
    if tok_lines:
        with open(os.path.join(args.out, "tokenizer_hf.jsonl"), "w", encoding="utf-8") as f:
            f.write("\n".join(tok_lines) + "\n")
    checks = {"reload_max_diff": reload_diff}
    import importlib.util
    if not args.byte_tokenizer and importlib.util.find_spec("transformers"):
        import hf_checks
        doc_start = int((val_stream == tok.bos_id).nonzero()[0])
        score_tokens = [int(x) for x in val_stream[doc_start: doc_start + 32]]
        prompt_ids = [tok.bos_id] + tok.encode(hf_checks.SAMPLE_PROMPT)
        checks.update(hf_checks.run_all(args.out, model, batch[:, :128], score_tokens, prompt_ids, tok_lines,
                                        device, MODEL_NAME, log))
    else:
        log("transformers checks skipped (byte tokenizer or transformers not installed)")
    phase("checks_s", t)

    if args.smoke and device.type == "cuda":
        checks["full_size_probe"] = probe_full_size(device, 10.0, log)

    report = {
        "model": MODEL_NAME, "command": " ".join(sys.argv), "seed": args.seed, "smoke": args.smoke,
        "versions": {"python": platform.python_version(), "torch": torch.__version__,
                     "transformers": _version("transformers"), "tokenizers": _version("tokenizers")},
        "device": torch.cuda.get_device_name() if device.type == "cuda" else "cpu",
        "model_config": vars(model_cfg), "train_config": vars(run_cfg),
        "parameters": {"trained": trained_params, "saved": saved_params},
        "corpus": {k: licences[k] for k in ("total_bytes", "files", "train_files", "val_files")},
        "tokens": {"train": train_stream.numel(), "val": val_stream.numel(),
                   "val_bytes_per_token": val_bytes / max(1, val_stream.numel()), "vocab": tok.vocab_size},
        "training": summary, "validation": figures, "checks": checks, "timings_s": timings,
        "total_s": round(time.time() - start, 1), "shards": shards,
    }
    with open(os.path.join(args.out, "train_report.json"), "w") as f:
        json.dump(report, f, indent=1)
        f.write("\n")
    log(f"done in {report['total_s']} s: val ppl {figures['val_ppl']:.2f} (unigram {figures['unigram_ppl']:.1f}), "
        f"MTP acceptance {figures['mtp_acceptance_rate']:.3f}, confidence AUC {figures['confidence_auc']:.3f}")


def probe_full_size(device, seconds, log):
    """Smoke runs on a GPU also time the full-size model on random tokens, to size the real run."""
    cfg = ModelConfig()
    model = DeepSeekV3(cfg).to(device)
    stream = torch.randint(0, cfg.vocab_size, (2_000_000,), dtype=torch.int32)
    torch.cuda.reset_peak_memory_stats()
    summary = train(model, stream, TrainConfig(log_every_s=1e9), device, seconds, 0, log)
    figures = {"steps": summary["steps"], "tokens_per_s": summary["tokens_per_s"],
               "peak_memory_gib": torch.cuda.max_memory_allocated() / 2**30}
    log(f"full-size probe: {figures}")
    return figures


def _version(package):
    import importlib.metadata
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


if __name__ == "__main__":
    main()
