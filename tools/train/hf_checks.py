# Checks of the saved directory with Hugging Face transformers (where it is installed): it loads
# the main model, its logits equal the training model's, its tokenizer and chat template behave;
# then a greedy sample and the engine-test fixtures (expected.json in tools/reference's format,
# expected_mtp.json for the MTP module and confidence head, which transformers does not run).
import json
import os
import sys

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
SAMPLE_PROMPT = "def fibonacci(n):"
TOP_K = 8


def load_hf(out_dir, device):
    from transformers import AutoModelForCausalLM
    model, info = AutoModelForCausalLM.from_pretrained(out_dir, dtype=torch.float32, attn_implementation="eager",
                                                       output_loading_info=True)
    return model.to(device).eval(), info


def compare_logits(out_dir, model, batch, device, log):
    """Max |logit difference| between transformers' float32 model and ours on batch."""
    hf, info = load_hf(out_dir, device)
    missing = sorted(info.get("missing_keys", []))
    unexpected = sorted(info.get("unexpected_keys", []))
    log(f"transformers load: {type(hf).__name__}, missing {missing}, {len(unexpected)} unexpected "
        f"(the MTP layer's, e.g. {unexpected[:2]})")
    with torch.no_grad():
        ours = model(batch.to(device), with_mtp=False)[0].float()
        theirs = hf(input_ids=batch.to(device), use_cache=False).logits.float()
    diff = float((ours - theirs).abs().max())
    agree = float((ours.argmax(-1) == theirs.argmax(-1)).float().mean())
    log(f"logits, ours vs transformers (float32, {tuple(batch.shape)}): max diff {diff:.3g}, "
        f"argmax agreement {agree:.4f}")
    return hf, {"hf_logits_max_diff": diff, "hf_argmax_agreement": agree, "hf_missing_keys": missing,
                "hf_unexpected_keys": len(unexpected)}


def check_tokenizer(out_dir, hf_tok_lines, log):
    """AutoTokenizer must give the ids the tokenizers library gave (BOS included), and the chat
    template must render DeepSeek-V3's prompt."""
    from transformers import AutoTokenizer
    tok = AutoTokenizer.from_pretrained(out_dir)
    mismatches = 0
    for line in hf_tok_lines:
        row = json.loads(line)
        ids = tok(row["text"])["input_ids"]
        if ids != row["ids_with_special"]:
            mismatches += 1
            log(f"AutoTokenizer differs on {row['text']!r}: {ids} vs {row['ids_with_special']}")
    messages = [{"role": "user", "content": "Write fibonacci."}]
    rendered = tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    log(f"chat template renders {rendered!r}")
    return tok, {"autotokenizer_mismatches": mismatches, "chat_template_render": rendered}


def greedy_sample(hf, tok, device, new_tokens, log):
    from transformers import GenerationConfig
    ids = tok(SAMPLE_PROMPT, return_tensors="pt")["input_ids"].to(device)
    config = GenerationConfig(do_sample=False, max_new_tokens=new_tokens, eos_token_id=tok.eos_token_id,
                              pad_token_id=tok.eos_token_id)
    with torch.no_grad():
        out = hf.generate(input_ids=ids, attention_mask=torch.ones_like(ids), generation_config=config)
    text = tok.decode(out[0, ids.shape[1]:], skip_special_tokens=False)
    log("greedy sample (transformers):\n" + SAMPLE_PROMPT + text)
    return SAMPLE_PROMPT + text


def write_fixtures(out_dir, model, score_tokens, prompt_ids, name, log):
    """expected.json from transformers on the CPU in float32 (tools/reference/make_fixtures.py's
    format); expected_mtp.json from our float32 model: per MTP position i (input: h_i and token
    i+1, predicting token i+2) the top-8 log-probs and the confidence head's probability."""
    sys.path.insert(0, os.path.join(HERE, "..", "reference"))
    import make_fixtures
    hf_cpu, _ = load_hf(out_dir, torch.device("cpu"))
    greedy, cache_diff = make_fixtures.greedy_section(hf_cpu, prompt_ids)
    expected = {"name": name, "architecture": type(hf_cpu).__name__, "config_format": "old",
                "score": make_fixtures.score_section(hf_cpu, score_tokens), "greedy": greedy}
    make_fixtures.write_expected(os.path.join(out_dir, "expected.json"), expected)
    log(f"expected.json: greedy {greedy['tokens']}, min margin {min(greedy['margins']):.3g}, "
        f"cached-vs-full {cache_diff:.3g}")

    cpu_model = model.to("cpu").float().eval()
    with torch.no_grad():
        _, mtp_logits, confidence = cpu_model(torch.tensor([score_tokens]))
        logprobs = torch.log_softmax(mtp_logits[0].double(), dim=-1)
        top = torch.topk(logprobs, TOP_K, dim=-1)
        probs = torch.sigmoid(confidence[0].double())
        hf_logits = hf_cpu(input_ids=torch.tensor([score_tokens]), use_cache=False).logits[0].float()
        ours = cpu_model(torch.tensor([score_tokens]), with_mtp=False)[0][0].float()
    positions = [{"pos": i, "next_token": score_tokens[i + 1],
                  "draft_top": [[int(t), float(v)] for v, t in zip(top.values[i], top.indices[i])],
                  "confidence": float(probs[i])} for i in range(len(score_tokens) - 1)]
    mtp = {"name": name, "tokens": score_tokens, "top_k": TOP_K,
           "note": "position i: MTP input is the main model's final normed hidden state at i and the "
                   "embedding of token i+1; draft_top predicts token i+2; confidence = "
                   "sigmoid(confidence_head(mtp block output at i))",
           "positions": positions}
    with open(os.path.join(out_dir, "expected_mtp.json"), "w") as f:
        json.dump(mtp, f, indent=1)
        f.write("\n")
    cpu_diff = float((hf_logits - ours).abs().max())
    log(f"expected_mtp.json written; CPU float32 logits ours vs transformers: max diff {cpu_diff:.3g}")
    return {"fixture_cache_diff": cache_diff, "fixture_min_margin": min(greedy["margins"]),
            "cpu_logits_max_diff": cpu_diff}


def run_all(out_dir, model, batch, score_tokens, prompt_ids, tok_lines, device, name, log):
    """Runs every check; a failing check is recorded, never fatal: the model is already saved."""
    results = {}
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    steps = [("logits", lambda: compare_logits(out_dir, model, batch, device, log)),
             ("tokenizer", lambda: check_tokenizer(out_dir, tok_lines, log))]
    objects = {}
    for key, fn in steps:
        try:
            obj, figures = fn()
            objects[key] = obj
            results.update(figures)
        except Exception as e:  # noqa: BLE001 - any failure is reported, the run goes on
            results[key + "_error"] = repr(e)
            log(f"check {key} FAILED: {e!r}")
    if "logits" in objects and "tokenizer" in objects:
        try:
            results["greedy_sample"] = greedy_sample(objects["logits"], objects["tokenizer"], device, 80, log)
        except Exception as e:  # noqa: BLE001
            results["sample_error"] = repr(e)
            log(f"greedy sample FAILED: {e!r}")
    try:
        results.update(write_fixtures(out_dir, model, score_tokens, prompt_ids, name, log))
    except Exception as e:  # noqa: BLE001
        results["fixture_error"] = repr(e)
        log(f"fixtures FAILED: {e!r}")
    return results

