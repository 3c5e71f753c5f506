"""Shared fixtures of the Python package's tests (tests/python/python_tests.cmake runs them with
PYTHONPATH at the built package and the paths below in the environment)."""

import json
import os
import subprocess

import pytest

CLI = os.environ.get("DEEPINFER_CLI", "")
DEFAULT_MODEL = os.environ.get("DEEPINFER_DEFAULT_MODEL", "")
TEST_DATA_DIR = os.environ.get("DEEPINFER_TEST_DATA_DIR", "")
SOURCE_DIR = os.environ.get("DEEPINFER_SOURCE_DIR", "")


def run_cli(*args, stdin=None):
    """The deepinfer CLI's stdout; fails the test on a non-zero exit."""
    done = subprocess.run([CLI, *args], input=stdin, capture_output=True, text=True, check=False)
    assert done.returncode == 0, f"deepinfer {' '.join(args)} failed:\n{done.stderr}"
    return done.stdout


def cli_generate_batch(tmp_path, model, requests, *flags):
    """`deepinfer generate --input/--output` on JSONL requests; its result lines, in order."""
    input_path, output_path = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    input_path.write_text("".join(json.dumps(r) + "\n" for r in requests))
    run_cli("generate", "--model", model, "--input", str(input_path), "--output", str(output_path), *flags)
    return [json.loads(line) for line in output_path.read_text().splitlines()]


@pytest.fixture(scope="session")
def default_model():
    assert os.path.isdir(DEFAULT_MODEL), "DEEPINFER_DEFAULT_MODEL must name the embedded model"
    return DEFAULT_MODEL
