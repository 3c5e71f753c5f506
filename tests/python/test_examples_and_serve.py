"""The examples in examples/ run, and `python3 -m deepinfer serve` answers as the engine does."""

import json
import os
import re
import signal
import subprocess
import sys
import urllib.request

import pytest

from conftest import SOURCE_DIR
from deepinfer import LLM, SamplingParams


@pytest.mark.parametrize("example, expected", [("offline_inference.py", "Chat reply:"), ("structured_output.py", "grammar:")])
def test_example_runs(example, expected):
    done = subprocess.run(
        [sys.executable, os.path.join(SOURCE_DIR, "examples", example)], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    assert expected in done.stdout


def _serve_and_complete(prompts, *flags):
    """Starts `python3 -m deepinfer serve` with flags, sends the prompts one after another (greedy,
    16 tokens); returns their texts, the server's /metrics and its exit code on SIGTERM."""
    server = subprocess.Popen(
        [sys.executable, "-m", "deepinfer", "serve", "--port", "0", "--served-model-name", "tiny", *flags],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        first_line = server.stdout.readline()
        assert first_line.startswith("deepinfer serve: listening on http://"), first_line
        url = re.search(r"http://\S+", first_line).group(0)
        texts = []
        for prompt in prompts:
            body = {"model": "tiny", "prompt": prompt, "max_tokens": 16, "temperature": 0}
            request = urllib.request.Request(
                url + "/v1/completions", data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
            )
            with urllib.request.urlopen(request, timeout=60) as response:
                texts.append(json.load(response)["choices"][0]["text"])
        with urllib.request.urlopen(url + "/metrics", timeout=60) as response:
            metrics = response.read().decode()
    finally:
        server.send_signal(signal.SIGTERM)
        exit_code = server.wait(timeout=30)
    return texts, metrics, exit_code


def _engine_texts(model, prompts):
    outputs = LLM(model, batch_invariant=True).generate(
        prompts, SamplingParams(temperature=0, max_tokens=16), use_tqdm=False
    )
    return [output.outputs[0].text for output in outputs]


def test_python_serve_runs_the_cli_server(default_model):
    prompts = ["def fibonacci(n):"]
    texts, _, exit_code = _serve_and_complete(prompts, "--batch-invariant")
    assert texts == _engine_texts(default_model, prompts)
    assert exit_code == 0


def test_python_serve_starts_data_parallel_ranks(default_model):
    # Idle ranks take turns, so two requests one after another reach both ranks.
    prompts = ["def fibonacci(n):", "import os"]
    texts, metrics, exit_code = _serve_and_complete(
        prompts, "--batch-invariant", "--data-parallel-size", "2", "--expert-parallel"
    )
    assert texts == _engine_texts(default_model, prompts)
    for rank in (0, 1):
        assert f'deepinfer_rank_routed_requests_total{{rank="{rank}"}} 1' in metrics, metrics
    assert exit_code == 0


def test_python_serve_names_a_bad_data_parallel_flag():
    done = subprocess.run(
        [sys.executable, "-m", "deepinfer", "serve", "--data-parallel-size", "two"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 2
    assert "--data-parallel-size must be an integer, got 'two'" in done.stderr
