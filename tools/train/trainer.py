# Training and evaluation for the DeepSeek-V3 model in model.py: packed token streams, the joint
# loss (main CE + lambda * MTP CE + confidence BCE), aux-loss-free router balancing, a time-based
# stop, and the validation figures (perplexities, MTP acceptance, confidence calibration).
import math
import time
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F


@dataclass
class TrainConfig:
    seq_len: int = 512
    batch_size: int = 128
    peak_lr: float = 3e-3
    min_lr_ratio: float = 0.1
    warmup_steps: int = 100
    weight_decay: float = 0.1
    grad_clip: float = 1.0
    mtp_lambda: float = 0.3
    bias_step: float = 1e-3     # aux-loss-free balancing step (DeepSeek-V3 uses 0.001)
    max_steps: int = 20000
    eval_chunks: int = 512
    log_every_s: float = 15.0


def pack(docs, bos_id, eos_id):
    """Token lists -> one int32 stream, each document as BOS ids EOS."""
    parts = []
    for ids in docs:
        parts += [np.array([bos_id], dtype=np.int32), np.asarray(ids, dtype=np.int32),
                  np.array([eos_id], dtype=np.int32)]
    return torch.from_numpy(np.concatenate(parts))


def unigram_log_probs(train_stream, vocab_size):
    """Add-one smoothed unigram model of the training stream (the baseline)."""
    counts = torch.bincount(train_stream.long(), minlength=vocab_size).double() + 1.0
    return (counts / counts.sum()).log()


def losses(model, chunk, cfg):
    """chunk [B, L+1] -> (main CE, MTP CE, confidence BCE, agreement rate)."""
    inputs, targets = chunk[:, :-1], chunk[:, 1:]
    logits, mtp_logits, confidence = model(inputs)
    vocab = logits.shape[-1]
    main = F.cross_entropy(logits.float().reshape(-1, vocab), targets.reshape(-1))
    mtp = F.cross_entropy(mtp_logits.float().reshape(-1, vocab), targets[:, 1:].reshape(-1))
    with torch.no_grad():
        agree = (mtp_logits.argmax(-1) == logits[:, 1:].argmax(-1)).float()
    bce = F.binary_cross_entropy_with_logits(confidence.float(), agree)
    return main, mtp, bce, agree.mean()


def lr_at(step, progress, cfg):
    if step < cfg.warmup_steps:
        return cfg.peak_lr * (step + 1) / cfg.warmup_steps
    cosine = 0.5 * (1.0 + math.cos(math.pi * min(progress, 1.0)))
    return cfg.peak_lr * (cfg.min_lr_ratio + (1.0 - cfg.min_lr_ratio) * cosine)


def make_optimizer(model, cfg, device):
    decay = [p for p in model.parameters() if p.dim() >= 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    groups = [{"params": decay, "weight_decay": cfg.weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    extra = {"fused": True} if device.type == "cuda" else {}
    return torch.optim.AdamW(groups, lr=cfg.peak_lr, betas=(0.9, 0.95), eps=1e-8, **extra)


def autocast(device):
    if device.type == "cuda":
        return torch.autocast("cuda", dtype=torch.bfloat16)
    return torch.autocast("cpu", enabled=False)


def train(model, train_stream, cfg, device, seconds, seed, log):
    """Trains until `seconds` elapse or cfg.max_steps; returns a summary dict."""
    model.train()
    opt = make_optimizer(model, cfg, device)
    gen = torch.Generator(device="cpu").manual_seed(seed)
    stream = train_stream.to(device)
    offsets = torch.arange(cfg.seq_len + 1, device=device)
    moe = model.moe_layers()
    start = last_log = time.time()
    step, tokens, history = 0, 0, []
    while step < cfg.max_steps:
        elapsed = time.time() - start
        if elapsed >= seconds:
            break
        progress = max(step / cfg.max_steps, elapsed / seconds)
        lr = lr_at(step, progress, cfg)
        for group in opt.param_groups:
            group["lr"] = lr
        starts = torch.randint(0, stream.numel() - cfg.seq_len - 1, (cfg.batch_size,), generator=gen).to(device)
        chunk = stream[starts[:, None] + offsets].long()
        with autocast(device):
            main, mtp, bce, agree = losses(model, chunk, cfg)
            loss = main + cfg.mtp_lambda * mtp + bce
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
        opt.step()
        for layer in moe:
            layer.update_bias(cfg.bias_step)
        step += 1
        tokens += chunk.numel() - cfg.batch_size
        now = time.time()
        if now - last_log >= cfg.log_every_s or step == 1:
            last_log = now
            loads = torch.stack([layer.last_load.float() for layer in moe])
            imbalance = float((loads.max(-1).values / loads.mean(-1)).max())
            row = {"step": step, "seconds": round(now - start, 1), "lr": lr, "loss": float(main.detach()),
                   "mtp_loss": float(mtp.detach()), "conf_bce": float(bce.detach()), "agree": float(agree),
                   "max_expert_load_over_mean": imbalance, "tokens_per_s": tokens / (now - start)}
            history.append(row)
            log(" ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in row.items()))
    if device.type == "cuda":
        torch.cuda.synchronize()
    seconds_used = time.time() - start
    return {"steps": step, "tokens": tokens, "seconds": seconds_used, "tokens_per_s": tokens / seconds_used,
            "history": history}


def auc(scores, labels):
    """Area under the ROC curve (rank statistic; ties broken by order)."""
    order = torch.argsort(scores)
    ranks = torch.empty_like(order, dtype=torch.float64)
    ranks[order] = torch.arange(1, len(scores) + 1, dtype=torch.float64, device=scores.device)
    pos = labels.bool()
    n_pos, n_neg = int(pos.sum()), int((~pos).sum())
    if n_pos == 0 or n_neg == 0:
        return float("nan")
    return float((ranks[pos].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg))


def expected_calibration_error(probs, labels, bins=10):
    edges = torch.linspace(0, 1, bins + 1, device=probs.device)
    total = 0.0
    for i in range(bins):
        mask = (probs >= edges[i]) & ((probs < edges[i + 1]) if i < bins - 1 else (probs <= 1))
        if mask.any():
            total += float(mask.float().mean() * (probs[mask].mean() - labels[mask].mean()).abs())
    return total


@torch.no_grad()
def evaluate(model, val_stream, unigram, cfg, device, batch_size):
    """Validation figures on non-overlapping chunks of the validation stream."""
    model.eval()
    length = cfg.seq_len + 1
    n_chunks = min(cfg.eval_chunks, (val_stream.numel() - 1) // cfg.seq_len)
    sums = {"main_nll": 0.0, "mtp_nll": 0.0, "unigram_nll": 0.0, "main_correct": 0.0, "draft_correct": 0.0}
    counts = {"main": 0, "mtp": 0}
    probs, agrees = [], []
    unigram = unigram.to(device)
    for first in range(0, n_chunks, batch_size):
        idx = torch.arange(first, min(first + batch_size, n_chunks))
        chunk = torch.stack([val_stream[i * cfg.seq_len: i * cfg.seq_len + length] for i in idx]).long().to(device)
        inputs, targets = chunk[:, :-1], chunk[:, 1:]
        with autocast(device):
            logits, mtp_logits, confidence = model(inputs)
        logits, mtp_logits = logits.float(), mtp_logits.float()
        vocab = logits.shape[-1]
        sums["main_nll"] += float(F.cross_entropy(logits.reshape(-1, vocab), targets.reshape(-1), reduction="sum"))
        sums["mtp_nll"] += float(F.cross_entropy(mtp_logits.reshape(-1, vocab), targets[:, 1:].reshape(-1),
                                                 reduction="sum"))
        sums["unigram_nll"] -= float(unigram[targets].sum())
        main_greedy, draft = logits.argmax(-1), mtp_logits.argmax(-1)
        sums["main_correct"] += float((main_greedy == targets).sum())
        sums["draft_correct"] += float((draft == targets[:, 1:]).sum())
        agrees.append((draft == main_greedy[:, 1:]).float().flatten())
        probs.append(torch.sigmoid(confidence.float()).flatten())
        counts["main"] += targets.numel()
        counts["mtp"] += targets[:, 1:].numel()
    model.train()
    agree, prob = torch.cat(agrees), torch.cat(probs)
    main_loss = sums["main_nll"] / counts["main"]
    mtp_loss = sums["mtp_nll"] / counts["mtp"]
    unigram_loss = sums["unigram_nll"] / counts["main"]
    rate = float(agree.mean())
    return {
        "val_tokens": counts["main"],
        "val_loss": main_loss, "val_ppl": math.exp(main_loss),
        "unigram_loss": unigram_loss, "unigram_ppl": math.exp(unigram_loss),
        "val_top1_accuracy": sums["main_correct"] / counts["main"],
        "mtp_val_loss": mtp_loss, "mtp_val_ppl": math.exp(mtp_loss),
        "mtp_draft_accuracy": sums["draft_correct"] / counts["mtp"],
        "mtp_acceptance_rate": rate,
        "confidence_auc": auc(prob, agree),
        "confidence_brier": float(((prob - agree) ** 2).mean()),
        "constant_brier": rate * (1.0 - rate),
        "confidence_ece": expected_calibration_error(prob, agree),
        "confidence_mean": float(prob.mean()),
    }
