"""The Python API's contracts on the embedded model: clear exceptions for bad arguments, threads
sharing one LLM, streaming equal to generate, Ctrl-C during a long generate, memory returned
after `del llm`."""

import ctypes
import gc
import os
import re
import signal
import threading

import pytest

import deepinfer
from deepinfer import LLM, GuidedDecodingParams, SamplingParams


@pytest.fixture(scope="module")
def llm(default_model):
    return LLM(default_model)


@pytest.mark.parametrize(
    "kwargs, field",
    [
        (dict(temperature=-1.0), "temperature"),
        (dict(temperature=float("nan")), "temperature"),
        (dict(temperature="hot"), "temperature"),
        (dict(top_p=0.0), "top_p"),
        (dict(top_k=-2), "top_k"),
        (dict(n=0), "n"),
        (dict(max_tokens=-1), "max_tokens"),
        (dict(min_tokens=20, max_tokens=10), "min_tokens"),
        (dict(logprobs=50), "logprobs"),
        (dict(stop=["ok", ""]), "stop"),
        (dict(presence_penalty=3.0), "presence_penalty"),
        (dict(guided_decoding=GuidedDecodingParams(regex="(unclosed")), "structured output"),
    ],
)
def test_bad_sampling_params_raise_value_error_naming_the_field(kwargs, field):
    with pytest.raises(ValueError, match=re.escape(field)):
        SamplingParams(**kwargs)


def test_bad_calls_raise_clear_exceptions(llm, tmp_path):
    with pytest.raises(ValueError, match="exactly one"):
        GuidedDecodingParams(json={"type": "object"}, regex="a+")
    with pytest.raises(TypeError):
        SamplingParams(best_of_everything=2)
    with pytest.raises(ValueError, match="model"):
        LLM(str(tmp_path / "missing"))
    with pytest.raises(ValueError, match="max_num_seqs"):
        LLM(max_num_seqs=0)
    with pytest.raises(ValueError, match="kv_cache_dtype: 'fp16' is not a KV cache dtype"):
        LLM(kv_cache_dtype="fp16")
    with pytest.raises(ValueError, match="prompts"):
        llm.generate([], use_tqdm=False)
    with pytest.raises(ValueError, match="prompts"):
        llm.generate(42, use_tqdm=False)
    with pytest.raises(ValueError, match=r"prompts\[0\]"):
        llm.generate([[1, 2, 10**9]], use_tqdm=False)
    with pytest.raises(ValueError, match="sampling_params"):
        llm.generate(["a", "b", "c"], [SamplingParams(), SamplingParams()], use_tqdm=False)
    with pytest.raises(ValueError, match="stop_token_ids"):
        llm.generate("x", SamplingParams(stop_token_ids=[10**8]), use_tqdm=False)
    params = SamplingParams()
    params.top_p = 2.0  # changed after construction: checked again when it runs
    with pytest.raises(ValueError, match="top_p"):
        llm.generate("x", params, use_tqdm=False)
    with pytest.raises(ValueError, match="chat_template"):
        llm.chat([{"role": "user", "content": "hi"}], chat_template="{{ messages }}")
    # After every refusal the engine still runs.
    assert len(llm.generate("x = 1", SamplingParams(max_tokens=2), use_tqdm=False)[0].outputs[0].token_ids) == 2


def test_vllm_defaults():
    params = SamplingParams()
    assert (params.n, params.temperature, params.top_p, params.top_k, params.min_p) == (1, 1.0, 1.0, 0, 0.0)
    assert (params.max_tokens, params.min_tokens, params.logprobs, params.seed, params.stop) == (16, 0, None, None, None)
    assert (params.repetition_penalty, params.skip_special_tokens, params.ignore_eos) == (1.0, True, False)


def test_threads_share_one_llm(llm):
    prompts = [f"def task_{i}(x):" for i in range(6)]
    params = SamplingParams(temperature=0.8, seed=5, max_tokens=12)
    expected = [o.outputs[0].token_ids for o in llm.generate(prompts, params, use_tqdm=False)]
    results = [None] * 8
    errors = []

    def work(slot):
        try:
            results[slot] = [o.outputs[0].token_ids for o in llm.generate(prompts, params, use_tqdm=False)]
        except BaseException as error:  # reported below, not lost in the thread
            errors.append(error)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(results))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    assert results == [expected] * len(results)


def test_stream_equals_generate(llm):
    params = SamplingParams(temperature=0.9, seed=2, max_tokens=20, logprobs=2, n=2)
    whole = llm.generate("class Node:", params, use_tqdm=False)[0]
    text, token_ids, logprobs = ["", ""], [[], []], [[], []]
    finished = False
    with llm.stream("class Node:", params) as stream:
        for delta in stream:
            assert not finished
            out = delta.outputs[0]
            text[out.index] += out.text
            token_ids[out.index] += out.token_ids
            logprobs[out.index] += out.logprobs
            finished = delta.finished
    assert finished
    for sample in whole.outputs:
        assert (text[sample.index], token_ids[sample.index]) == (sample.text, sample.token_ids)
        assert logprobs[sample.index] == sample.logprobs
    # A stream left early frees the engine for the next call; until then this thread may not wait for it.
    stream = llm.stream("import sys", SamplingParams(max_tokens=50))
    next(stream)
    with pytest.raises(RuntimeError, match="open stream"):
        llm.generate("x", use_tqdm=False)
    stream.close()
    assert llm.generate("class Node:", params, use_tqdm=False)[0].outputs == whole.outputs


def test_ctrl_c_stops_a_long_generate_cleanly(llm):
    # The first prompt finishes at once; its progress update asks for SIGINT while the long ones run.
    prompts = ["x"] + [f"def long_{i}():" for i in range(4)]
    params = [SamplingParams(max_tokens=1)] + [SamplingParams(max_tokens=4000, ignore_eos=True)] * 4
    first_done = threading.Event()

    class InterruptingBar:
        def __init__(self, **_):
            pass

        def update(self, _):
            first_done.set()

        def close(self):
            pass

    sender = threading.Thread(target=lambda: first_done.wait() and os.kill(os.getpid(), signal.SIGINT))
    sender.start()
    with pytest.raises(KeyboardInterrupt):
        llm.generate(prompts, params, use_tqdm=InterruptingBar)
    sender.join()
    # The aborted requests are gone: the same call gives what a fresh one gives.
    params = SamplingParams(temperature=0, max_tokens=8)
    assert llm.generate("def f():", params, use_tqdm=False)[0].outputs[0].text == LLM().generate(
        "def f():", params, use_tqdm=False
    )[0].outputs[0].text


def rss_bytes():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def test_del_llm_returns_memory(default_model):
    libc = ctypes.CDLL("libc.so.6")

    def settled_rss():
        gc.collect()
        libc.malloc_trim(0)  # return freed heap pages so RSS shows what is still held
        return rss_bytes()

    def load_run_delete():
        llm = LLM(default_model, kv_cache_bytes=64 << 20)
        llm.generate(["def f():"] * 4, SamplingParams(max_tokens=8), use_tqdm=False)
        held = rss_bytes()
        del llm
        return held

    before = settled_rss()
    held = load_run_delete()
    assert held - before > 16 << 20  # the model (27 MB of weights) was resident
    after_first = settled_rss()
    for _ in range(2):
        load_run_delete()
    after = settled_rss()
    # What a loaded LLM holds comes back: repeated loads do not accumulate it.
    assert after - before < (held - before) // 2
    assert after - after_first < (held - before) // 4


def test_package_surface():
    assert deepinfer.__version__
    assert os.path.isdir(deepinfer.DEFAULT_MODEL)
    for name in ("LLM", "SamplingParams", "RequestOutput", "CompletionOutput", "GuidedDecodingParams"):
        assert name in deepinfer.__all__
