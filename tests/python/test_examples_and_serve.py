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


def test_python_serve_runs_the_cli_server(default_model):
    server = subprocess.Popen(
        [sys.executable, "-m", "deepinfer", "serve", "--port", "0", "--served-model-name", "tiny", "--batch-invariant"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        first_line = server.stdout.readline()
        assert first_line.startswith("deepinfer serve: listening on http://"), first_line
        url = re.search(r"http://\S+", first_line).group(0)
        body = {"model": "tiny", "prompt": "def fibonacci(n):", "max_tokens": 16, "temperature": 0}
        request = urllib.request.Request(
            url + "/v1/completions", data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
        )
        with urllib.request.urlopen(request, timeout=60) as response:
            served = json.load(response)["choices"][0]["text"]
    finally:
        server.send_signal(signal.SIGTERM)
        exit_code = server.wait(timeout=30)
    expected = LLM(default_model, batch_invariant=True).generate(
        "def fibonacci(n):", SamplingParams(temperature=0, max_tokens=16), use_tqdm=False
    )
    assert served == expected[0].outputs[0].text
    assert exit_code == 0
