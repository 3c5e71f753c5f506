#!/usr/bin/env python3
# Renders the model card (DIR/README.md) of a directory written by train.py, from its
# config.json, train_report.json and corpus_licences.json, so every figure in the card is the
# one the run measured. Usage: python3 tools/train/render_card.py DIR
import json
import os
import sys


def load(dir_, name):
    with open(os.path.join(dir_, name), encoding="utf-8") as f:
        return json.load(f)


def fmt(value, digits=4):
    if value is None:
        return "n/a"
    if isinstance(value, float):
        return f"{value:.{digits}g}"
    return str(value)


def architecture_rows(cfg, report):
    n = cfg["num_hidden_layers"]
    return [
        ("architecture", f"`{cfg['architectures'][0]}` (`model_type` `{cfg['model_type']}`)"),
        ("parameters", f"{report['parameters']['saved']:,} in the checkpoint (incl. the MTP layer's copies of "
                       f"embedding and head); {report['parameters']['trained']:,} trained"),
        ("layers", f"{n} + 1 MTP layer (`model.layers.{n}.*`); layer 0 dense (`first_k_dense_replace` "
                   f"{cfg['first_k_dense_replace']}), the others MoE"),
        ("hidden / vocab", f"{cfg['hidden_size']} / {cfg['vocab_size']}; untied embeddings"),
        ("attention (MLA)", f"{cfg['num_attention_heads']} heads, q_lora_rank {cfg['q_lora_rank']}, kv_lora_rank "
                            f"{cfg['kv_lora_rank']}, qk_nope {cfg['qk_nope_head_dim']}, qk_rope "
                            f"{cfg['qk_rope_head_dim']}, v {cfg['v_head_dim']}"),
        ("rope", f"default, theta {fmt(cfg['rope_theta'])}, interleaved pairs (`rope_interleave` true); "
                 f"max_position_embeddings {cfg['max_position_embeddings']} (trained on "
                 f"{report['train_config']['seq_len']}-token windows)"),
        ("MoE", f"{cfg['n_routed_experts']} routed experts + {cfg['n_shared_experts']} shared, top-"
                f"{cfg['num_experts_per_tok']}, sigmoid scores with `e_score_correction_bias` (noaux_tc), "
                f"n_group {cfg['n_group']}, norm_topk_prob, routed_scaling_factor {cfg['routed_scaling_factor']}; "
                f"moe_intermediate_size {cfg['moe_intermediate_size']}, dense intermediate_size "
                f"{cfg['intermediate_size']}"),
        ("MTP", "`num_nextn_predict_layers` 1: enorm, hnorm, eh_proj, one MLA + MoE block, shared_head "
                "(norm + a copy of lm_head), embed_tokens (a copy)"),
        ("confidence head", f"`model.layers.{n}.confidence_head.weight` [1, {cfg['hidden_size']}] and "
                            f"`.bias` [1]"),
        ("dtype", "bfloat16 (the router bias `e_score_correction_bias` float32, as in DeepSeek-V3)"),
    ]


def render(dir_):
    cfg, report, lic = load(dir_, "config.json"), load(dir_, "train_report.json"), load(dir_, "corpus_licences.json")
    v, tr, checks = report["validation"], report["training"], report["checks"]
    n = cfg["num_hidden_layers"]
    out = [f"# {report['model']}", "",
           "A small DeepSeek-V3-architecture model (MLA, MoE, MTP) trained from scratch on permissively "
           "licensed Python source, shipped with deepinfer as its default model. **Intended use: a demo and "
           "test model** — it makes Python-looking text and exercises every DeepSeek-V3 code path "
           "(MLA, sigmoid-routed MoE with correction bias, MTP drafts, a confidence head) on a CPU in real "
           "time. It is not a useful assistant: it knows no facts, follows no instructions and its code does "
           "not run. The training data's licences are listed below.", "", "## Architecture", "", "| | |", "| --- | --- |"]
    out += [f"| {k} | {val} |" for k, val in architecture_rows(cfg, report)]
    out += ["", "MTP (DeepSeek-V3, depth 1): for position i, `h'_i = eh_proj([enorm(embed(t_{i+1})); "
            "hnorm(h_i)])` with `h_i` the main model's final hidden state after `model.norm`; the block "
            f"(`model.layers.{n}.self_attn/mlp/...`) runs causally over h'; then `shared_head.norm` and "
            "`shared_head.head` give the distribution of t_{i+2}.",
            "",
            "Confidence head (the seeds' DSpark design): `c_i = sigmoid(confidence_head.weight · x_i + "
            "confidence_head.bias)`, `x_i` the MTP block's output at i before `shared_head.norm`. It estimates "
            "the probability that the MTP draft (its argmax) equals the main model's greedy token at i+1, i.e. "
            "that greedy verification accepts it. Trained with binary cross-entropy on detached inputs.",
            "", "## Tokenizer", "",
            f"Byte-level BPE, {report['tokens']['vocab']} tokens, trained with Hugging Face `tokenizers` on the "
            "training split; DeepSeek-V3's pre-tokenizer (digit groups of 1-3, CJK runs, its split regex). "
            "Ids 0-14: `<｜begin▁of▁sentence｜>` (BOS, added by the post-processor), `<｜end▁of▁sentence｜>` "
            "(EOS), `<｜User｜>`, `<｜Assistant｜>`, `<think>`, `</think>` and the tool-call markers. "
            "tokenizer_config.json carries DeepSeek-V3's chat template. "
            f"{fmt(report['tokens']['val_bytes_per_token'], 3)} bytes per token on the validation split.",
            "", "## Training data", "",
            f"{lic['files']} Python files ({lic['total_bytes'] / 1e6:.1f} MB after exact deduplication) from "
            f"the Python standard library and installed packages whose metadata names a licence among "
            f"{', '.join(lic['allowed'])}; {lic['val_files']} files held out for validation (split by file, "
            f"seed {report['seed']}). {len(lic['excluded'])} installed distributions were left out for their "
            "licence (see corpus_licences.json).", "",
            "| source | version | licence | files | MB |", "| --- | --- | --- | --- | --- |"]
    out += [f"| {s['package']} | {s['version']} | {s['licence']} | {s['files']} | {s['bytes'] / 1e6:.2f} |"
            for s in lic["sources"]]
    tc = report["train_config"]
    out += ["", "## Training", "",
            f"`{report['command']}` on {report['device']} (torch {report['versions']['torch']}): "
            f"{tr['steps']} steps, {tr['tokens'] / 1e6:.0f}M tokens in {tr['seconds']:.0f} s "
            f"({tr['tokens_per_s'] / 1e6:.2f}M tokens/s); whole script {report['total_s']} s. AdamW "
            f"(0.9, 0.95, weight decay {tc['weight_decay']}), peak lr {tc['peak_lr']}, {tc['warmup_steps']} warmup "
            f"steps then cosine to {tc['min_lr_ratio']}x over the time budget, batch {tc['batch_size']} x "
            f"{tc['seq_len']} tokens, bf16 autocast, gradient clip {tc['grad_clip']}. Loss = CE(main) + "
            f"{tc['mtp_lambda']} CE(MTP) + BCE(confidence). Router bias: +/-{tc['bias_step']} per step toward "
            "equal expert load (auxiliary-loss-free balancing).",
            "", "## Results (validation split, bf16 weights as shipped)", "",
            "| figure | value |", "| --- | --- |",
            f"| validation loss / perplexity | {fmt(v['val_loss'])} / {fmt(v['val_ppl'])} |",
            f"| unigram baseline perplexity (same tokens) | {fmt(v['unigram_ppl'])} |",
            f"| next-token top-1 accuracy | {fmt(v['val_top1_accuracy'])} |",
            f"| MTP loss / perplexity (token i+2) | {fmt(v['mtp_val_loss'])} / {fmt(v['mtp_val_ppl'])} |",
            f"| MTP draft accuracy vs the data | {fmt(v['mtp_draft_accuracy'])} |",
            f"| **MTP greedy acceptance rate** (draft == main model's greedy token) | {fmt(v['mtp_acceptance_rate'])} |",
            f"| confidence head AUC | {fmt(v['confidence_auc'])} |",
            f"| confidence head Brier (constant predictor) | {fmt(v['confidence_brier'])} ({fmt(v['constant_brier'])}) |",
            f"| confidence head ECE (10 bins) | {fmt(v['confidence_ece'])} |",
            f"| validation tokens | {v['val_tokens']} |",
            f"| transformers float32 logits vs training model, max diff | {fmt(checks.get('hf_logits_max_diff'))} |"]
    if checks.get("greedy_sample"):
        out += ["", "Greedy sample (transformers, 80 tokens):", "", "```python", checks["greedy_sample"], "```"]
    out += ["", "## Files", "",
            "config.json, generation_config.json, tokenizer.json, tokenizer_config.json, "
            "model.safetensors.index.json + shards, train_report.json (every figure above), "
            "corpus_licences.json. The engine-test fixtures from the same run (expected.json from "
            "transformers in float32, expected_mtp.json for the MTP draft and confidence head) are in "
            "tests/data/deepinfer_tiny_v3/. "
            "tests/model/test_default_model.cpp checks deepinfer against them. `models/default` links to this "
            "directory, so `deepinfer serve` and `make run` serve it. "
            "Rebuild: `bash tools/train/run_gpu.sh` on one H200 (see tools/train/README.md).", ""]
    return "\n".join(out)


def main():
    if len(sys.argv) != 2:
        sys.exit("usage: render_card.py DIR")
    text = render(sys.argv[1])
    with open(os.path.join(sys.argv[1], "README.md"), "w", encoding="utf-8") as f:
        f.write(text)
    print(f"wrote {os.path.join(sys.argv[1], 'README.md')} ({len(text)} bytes)")


if __name__ == "__main__":
    main()
