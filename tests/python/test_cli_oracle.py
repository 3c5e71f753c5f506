"""The Python API against the deepinfer CLI on the same models: identical token ids, text,
logprobs and finish reasons (batch-invariant on both sides, so the batch's make-up cannot matter),
and on a fixture also the greedy tokens Hugging Face transformers produced."""

import json
import os
import re

import pytest

from conftest import TEST_DATA_DIR, cli_generate_batch, run_cli
from deepinfer import LLM, GuidedDecodingParams, SamplingParams

SCHEMA = {
    "type": "object",
    "properties": {"name": {"type": "string", "maxLength": 6}, "count": {"type": "integer"}},
    "required": ["name", "count"],
}

# (prompt, Python SamplingParams kwargs, the same request in the CLI's JSONL names): greedy with
# top logprobs, seeded sampling with filters, a stop string, n = 2, and each structured form.
CASES = [
    ("def fibonacci(n):", dict(temperature=0, max_tokens=24, logprobs=3), dict(temperature=0, max_tokens=24, logprobs=3)),
    (
        "import os\n",
        dict(temperature=0.8, top_p=0.9, top_k=40, seed=7, max_tokens=20, logprobs=2),
        dict(temperature=0.8, top_p=0.9, top_k=40, seed=7, max_tokens=20, logprobs=2),
    ),
    (
        "class Stack:",
        dict(temperature=0, max_tokens=48, stop=["self"]),
        dict(temperature=0, max_tokens=48, stop=["self"]),
    ),
    (
        "for i in range(",
        dict(temperature=1.0, seed=3, n=2, max_tokens=12, logprobs=0, presence_penalty=0.5),
        dict(temperature=1.0, seed=3, n=2, max_tokens=12, logprobs=0, presence_penalty=0.5),
    ),
    (
        "config = ",
        dict(temperature=0, max_tokens=40, guided_decoding=GuidedDecodingParams(json=SCHEMA)),
        dict(temperature=0, max_tokens=40, guided_json=SCHEMA),
    ),
    (
        "phone = ",
        dict(temperature=0.7, seed=1, max_tokens=16, guided_decoding=GuidedDecodingParams(regex=r"[0-9]{3}-[0-9]{4}")),
        dict(temperature=0.7, seed=1, max_tokens=16, guided_regex=r"[0-9]{3}-[0-9]{4}"),
    ),
    (
        "answer = ",
        dict(temperature=0, max_tokens=8, structured_outputs=GuidedDecodingParams(choice=["True", "False", "None"])),
        dict(temperature=0, max_tokens=8, guided_choice=["True", "False", "None"]),
    ),
]


def top_entries(position):
    """A vLLM logprobs dict's ranked entries as the CLI writes them: [[token_id, logprob], ...]."""
    ranked = sorted((lp.rank, token_id, lp.logprob) for token_id, lp in position.items() if lp.rank is not None)
    return [[token_id, logprob] for _, token_id, logprob in ranked]


def assert_same_as_cli(output, line):
    samples = line.get("outputs", [line])
    assert len(output.outputs) == len(samples)
    for sample, expected in zip(output.outputs, samples):
        assert sample.token_ids == expected["token_ids"]
        if "text" in expected:
            assert sample.text == expected["text"]
        assert sample.finish_reason == expected["finish_reason"]
        assert (sample.stop_reason is None) == ("stop_reason" not in expected)
        if sample.stop_reason is not None:
            assert str(sample.stop_reason) == expected["stop_reason"]
        if "logprobs" in expected:
            chosen = [position[token].logprob for token, position in zip(sample.token_ids, sample.logprobs)]
            assert chosen == expected["logprobs"]
            assert [top_entries(position) for position in sample.logprobs] == expected["top_logprobs"]
        else:
            assert sample.logprobs is None
    assert len(output.prompt_token_ids) == line["num_prompt_tokens"]


@pytest.fixture(scope="module")
def llm(default_model):
    return LLM(default_model, batch_invariant=True)


def test_batch_matches_cli_on_the_default_model(llm, default_model, tmp_path):
    prompts = [prompt for prompt, _, _ in CASES]
    params = [SamplingParams(**kwargs) for _, kwargs, _ in CASES]
    outputs = llm.generate(prompts, params, use_tqdm=False)
    lines = cli_generate_batch(
        tmp_path, default_model, [dict(prompt=p, **fields) for p, _, fields in CASES], "--batch-invariant"
    )
    for output, line, prompt in zip(outputs, lines, prompts):
        assert output.prompt == prompt
        assert_same_as_cli(output, line)
    # The constraints hold wherever the output was not cut short.
    structured = {o.prompt: o.outputs[0] for o in outputs[4:]}
    if structured["config = "].finish_reason == "stop":
        assert set(json.loads(structured["config = "].text)) == {"name", "count"}
    if structured["phone = "].finish_reason == "stop":
        assert re.fullmatch(r"[0-9]{3}-[0-9]{4}", structured["phone = "].text)
    assert structured["answer = "].text in ("True", "False", "None")


def test_chat_and_templates_match_cli(llm, default_model):
    messages = [{"role": "user", "content": "Write a function that sorts a list"}]
    tools = [{"type": "function", "function": {"name": "run", "description": "Runs code",
                                                "parameters": {"type": "object", "properties": {"code": {"type": "string"}}}}}]
    request = json.dumps({"messages": messages, "tools": tools})
    tokenizer = llm.get_tokenizer()
    assert tokenizer.apply_chat_template(messages, tools=tools, add_generation_prompt=True, tokenize=False) == run_cli(
        "prompt", "--model", default_model, stdin=request
    )
    assert tokenizer.apply_chat_template(messages, tools=tools, add_generation_prompt=True) == json.loads(
        run_cli("prompt", "--model", default_model, "--tokens", stdin=request)
    )
    reply = llm.chat(messages, SamplingParams(temperature=0, max_tokens=48), use_tqdm=False)[0]
    cli_text = run_cli("generate", "--model", default_model, "--chat", "--prompt", messages[0]["content"],
                       "--max-tokens", "48", "--batch-invariant")
    assert reply.outputs[0].text + "\n" == cli_text
    assert reply.prompt == tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
    assert tokenizer.decode(tokenizer.encode("def f(x):\n    return x", add_special_tokens=False)) == "def f(x):\n    return x"


def test_fixture_matches_cli_and_transformers(tmp_path):
    model = os.path.join(TEST_DATA_DIR, "qwen3")
    with open(os.path.join(model, "expected.json")) as f:
        greedy = json.load(f)["greedy"]
    llm = LLM(model, batch_invariant=True)
    requests = [
        dict(prompt_token_ids=greedy["prompt"], temperature=0, max_tokens=greedy["max_tokens"], logprobs=4),
        dict(prompt_token_ids=[5, 6, 7, 8, 9], temperature=0.9, seed=11, max_tokens=10, logprobs=1, stop_token_ids=[27]),
    ]
    params = [SamplingParams(**{k: v for k, v in r.items() if k != "prompt_token_ids"}) for r in requests]
    outputs = llm.generate([r["prompt_token_ids"] for r in requests], params, use_tqdm=False)
    for output, line in zip(outputs, cli_generate_batch(tmp_path, model, requests, "--batch-invariant")):
        assert output.prompt is None
        assert_same_as_cli(output, line)
    assert outputs[0].outputs[0].token_ids == greedy["tokens"]
    assert outputs[0].outputs[0].text == ""  # no tokenizer.json: token ids only


def test_fp8_kv_cache_matches_cli(default_model, tmp_path):
    """vLLM's kv_cache_dtype="fp8" reaches the engine as the CLI's --kv-cache-dtype fp8 does."""
    llm = LLM(default_model, batch_invariant=True, kv_cache_dtype="fp8")
    prompts = [prompt for prompt, _, _ in CASES[:4]]
    params = [SamplingParams(**kwargs) for _, kwargs, _ in CASES[:4]]
    outputs = llm.generate(prompts, params, use_tqdm=False)
    lines = cli_generate_batch(tmp_path, default_model, [dict(prompt=p, **fields) for p, _, fields in CASES[:4]],
                               "--batch-invariant", "--kv-cache-dtype", "fp8")
    for output, line in zip(outputs, lines):
        assert_same_as_cli(output, line)
    float32 = cli_generate_batch(tmp_path, default_model, [dict(prompt=p, **fields) for p, _, fields in CASES[:4]],
                                 "--batch-invariant")
    # The coarser cache changes some logprobs (it is not the float32 run).
    assert [line.get("logprobs") for line in lines] != [line.get("logprobs") for line in float32]
