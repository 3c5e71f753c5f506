"""LLM: offline batch inference over the engine's deepinfer::LLM, shaped like vLLM's LLM.

One LLM may be shared by threads: calls run one at a time (a thread waits for the one running),
each batching all of its own prompts. Engine work runs with the GIL released, and Ctrl-C during a
long generate aborts its requests and raises KeyboardInterrupt, leaving the LLM usable.
"""

from __future__ import annotations

import itertools
import json
import os
import random
import threading
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple, Union

from deepinfer import _core
from deepinfer.outputs import CompletionOutput, Logprob, PromptLogprobs, RequestOutput, SampleLogprobs
from deepinfer.sampling_params import SamplingParams
from deepinfer.tokenizer import Conversation, Tokenizer

#: The embedded default model (a 14M-parameter DeepSeek-V3-shaped model that writes Python);
#: LLM() loads it when no model is given.
DEFAULT_MODEL = os.path.join(os.path.dirname(os.path.abspath(__file__)), "models", "default")

# A prompt: text, token ids, or vLLM's {"prompt": text} / {"prompt_token_ids": ids}.
PromptType = Union[str, Sequence[int], Dict[str, Any]]

# generation_config.json keys that vLLM reads as the model's default sampling parameters.
_GENERATION_CONFIG_FIELDS = {
    "temperature": "temperature",
    "top_p": "top_p",
    "top_k": "top_k",
    "min_p": "min_p",
    "repetition_penalty": "repetition_penalty",
    "max_new_tokens": "max_tokens",
}


class LLM:
    """A model loaded once for offline generation.

    model: a Hugging Face model directory (config.json, *.safetensors, tokenizer.json); None loads
    the embedded default model (DEFAULT_MODEL). device: "cpu", "cuda" or "ref" (scalar reference
    kernels). max_model_len: the context length (None: the model's). kv_cache_bytes: the KV cache's
    size (None: 1 GiB on the CPU; on CUDA what gpu_memory_utilization leaves). batch_invariant:
    every request gives bit-identical tokens and logprobs whatever else is batched with it.
    kv_cache_dtype: the KV cache's element type, "auto", "float32", "bfloat16" or "fp8" (e4m3 with
    the checkpoint's k/v scales, else 1; CPU and CUDA), as vLLM's argument of that name.
    seed: requests without a seed get one from a generator seeded with this, so a script's runs
    repeat (None: the engine derives each request's seed from its id).
    """

    def __init__(
        self,
        model: Optional[Union[str, os.PathLike]] = None,
        *,
        device: str = "cpu",
        max_num_seqs: int = 64,
        max_model_len: Optional[int] = None,
        max_num_batched_tokens: int = 2048,
        kv_cache_bytes: Optional[int] = None,
        gpu_memory_utilization: float = 0.9,
        batch_invariant: bool = False,
        enable_prefix_caching: bool = True,
        speculative_tokens: int = 0,
        kv_cache_dtype: str = "auto",
        seed: Optional[int] = 0,
        show_progress: bool = True,
    ) -> None:
        self.model = os.path.expanduser(os.fspath(model)) if model is not None else DEFAULT_MODEL
        if not os.path.isdir(self.model):
            raise ValueError(f"model: '{self.model}' is not a directory (a Hugging Face model directory is expected)")
        for name, value, low in (
            ("max_num_seqs", max_num_seqs, 1),
            ("max_num_batched_tokens", max_num_batched_tokens, 1),
            ("max_model_len", max_model_len, 1),
            ("kv_cache_bytes", kv_cache_bytes, 1),
            ("speculative_tokens", speculative_tokens, 0),
        ):
            if value is not None and (not isinstance(value, int) or isinstance(value, bool) or value < low):
                raise ValueError(f"{name} must be an integer >= {low}, got {value!r}")
        if not isinstance(kv_cache_dtype, str):
            raise ValueError(f"kv_cache_dtype must be a string such as 'fp8', got {kv_cache_dtype!r}")
        if not 0.0 < gpu_memory_utilization <= 1.0:
            raise ValueError(f"gpu_memory_utilization must be in (0, 1], got {gpu_memory_utilization!r}")
        self._engine = _core.Engine(
            model_dir=self.model,
            device=device,
            max_num_seqs=max_num_seqs,
            max_num_batched_tokens=max_num_batched_tokens,
            max_model_len=max_model_len or 0,
            kv_cache_bytes=kv_cache_bytes or 0,
            gpu_memory_utilization=gpu_memory_utilization,
            batch_invariant=batch_invariant,
            enable_prefix_caching=enable_prefix_caching,
            speculative_tokens=speculative_tokens,
            kv_cache_dtype=kv_cache_dtype,
            show_progress=show_progress,
        )
        self._seeds = random.Random(seed) if seed is not None else None
        self._lock = threading.Lock()  # guards _seeds, _request_ids and _tokenizer
        self._request_ids = itertools.count()
        self._tokenizer: Optional[Tokenizer] = None

    # --- the model's tokenizer and defaults -----------------------------------------------------

    def get_tokenizer(self) -> Tokenizer:
        """The model's tokenizer (ValueError when the directory has no tokenizer.json)."""
        with self._lock:
            if self._tokenizer is None:
                if not self._engine.has_tokenizer:
                    raise ValueError(f"{self.model} has no tokenizer.json: give prompts as token ids")
                self._tokenizer = Tokenizer(self.model)
            return self._tokenizer

    def get_default_sampling_params(self) -> SamplingParams:
        """SamplingParams with the model's generation_config.json defaults, as vLLM does."""
        path = os.path.join(self.model, "generation_config.json")
        overrides: Dict[str, Any] = {}
        if os.path.exists(path):
            with open(path, encoding="utf-8") as f:
                config = json.load(f)
            for key, field_name in _GENERATION_CONFIG_FIELDS.items():
                if config.get(key) is not None:
                    overrides[field_name] = config[key]
        return SamplingParams(**overrides)

    # --- generation -----------------------------------------------------------------------------

    def generate(
        self,
        prompts: Union[PromptType, Sequence[PromptType]],
        sampling_params: Optional[Union[SamplingParams, Sequence[SamplingParams]]] = None,
        *,
        use_tqdm: Union[bool, Callable[..., Any]] = True,
    ) -> List[RequestOutput]:
        """Generates for every prompt, batched; results in prompt order.

        prompts: a text, a list of token ids, {"prompt": text} / {"prompt_token_ids": ids}, or a
        list of those. sampling_params: one for all prompts or one per prompt (None: the model's
        defaults). use_tqdm: a progress bar over 2+ prompts (tqdm when installed, or a callable
        that makes one like tqdm; else the engine's own bar).
        """
        inputs, texts = self._prompt_inputs(prompts)
        return self._generate(inputs, texts, sampling_params, use_tqdm)

    def chat(
        self,
        messages: Union[Conversation, Sequence[Conversation]],
        sampling_params: Optional[Union[SamplingParams, Sequence[SamplingParams]]] = None,
        *,
        use_tqdm: Union[bool, Callable[..., Any]] = True,
        chat_template: Optional[str] = None,
        add_generation_prompt: bool = True,
        continue_final_message: bool = False,
        tools: Optional[List[Dict[str, Any]]] = None,
        chat_template_kwargs: Optional[Dict[str, Any]] = None,
    ) -> List[RequestOutput]:
        """Generates replies to one conversation (a list of OpenAI-style messages) or a list of them,
        rendered by the model's chat template with tools and template variables
        (chat_template_kwargs, e.g. {"enable_thinking": False}). The output is the raw completion:
        reasoning and tool-call markup are left in the text, as in vLLM's LLM.chat."""
        if chat_template is not None:
            raise ValueError("chat_template: deepinfer renders each model family's template natively; "
                             "custom Jinja templates are not supported")
        if continue_final_message:
            raise ValueError("continue_final_message is not supported")
        conversations = [messages] if _is_conversation(messages) else list(messages)
        tokenizer = self.get_tokenizer()
        inputs: List[List[int]] = []
        texts: List[Optional[str]] = []
        for i, conversation in enumerate(conversations):
            if not _is_conversation(conversation):
                raise ValueError(f"messages[{i}] must be a list of message dicts")
            try:
                text, ids = tokenizer.render_chat(conversation, tools, add_generation_prompt, chat_template_kwargs)
            except ValueError as error:
                raise ValueError(f"conversation {i}: {error}") from None
            inputs.append(ids)
            texts.append(text)
        return self._generate(inputs, texts, sampling_params, use_tqdm)

    def stream(
        self, prompt: PromptType, sampling_params: Optional[SamplingParams] = None
    ) -> "RequestStream":
        """Streams one prompt: an iterator of RequestOutput deltas (each CompletionOutput holds the
        new text and token ids of one sample; finished is set on the last). The stream holds the
        engine until it ends or is closed (use it in a with block or run it to the end); other
        threads' calls wait for it."""
        inputs, texts = self._prompt_inputs(prompt)
        if len(inputs) != 1:
            raise ValueError("stream takes one prompt")
        params = self._resolve_params(sampling_params, 1)[0]
        return RequestStream(self, inputs[0], texts[0], params)

    # --- internals ------------------------------------------------------------------------------

    def _next_request_id(self) -> str:
        with self._lock:
            return str(next(self._request_ids))

    def _resolve_params(
        self, sampling_params: Optional[Union[SamplingParams, Sequence[SamplingParams]]], num_prompts: int
    ) -> List[SamplingParams]:
        if sampling_params is None:
            sampling_params = self.get_default_sampling_params()
        params = [sampling_params] if isinstance(sampling_params, SamplingParams) else list(sampling_params)
        if len(params) != 1 and len(params) != num_prompts:
            raise ValueError(
                f"sampling_params: give one SamplingParams or one per prompt ({num_prompts} prompts, {len(params)} given)"
            )
        for i, p in enumerate(params):
            if not isinstance(p, SamplingParams):
                raise ValueError(f"sampling_params[{i}] must be a SamplingParams, got {type(p).__name__}")
        if self._seeds is None or all(p.seed is not None for p in params):
            return params
        # Unseeded requests draw from the LLM's generator: one seed per prompt.
        per_prompt = params if len(params) == num_prompts else params * num_prompts
        seeded = []
        with self._lock:
            for p in per_prompt:
                if p.seed is None:
                    p = p.clone()
                    p.seed = self._seeds.getrandbits(63)
                seeded.append(p)
        return seeded

    def _prompt_inputs(
        self, prompts: Union[PromptType, Sequence[PromptType]]
    ) -> Tuple[List[Union[str, List[int]]], List[Optional[str]]]:
        """Engine inputs (text or token ids) and the prompt texts RequestOutput reports."""
        if isinstance(prompts, (str, dict)) or (_is_token_ids(prompts) and len(prompts) > 0):
            prompts = [prompts]
        if not isinstance(prompts, Sequence) or len(prompts) == 0:
            raise ValueError("prompts: give a text, a list of token ids, or a non-empty list of them")
        inputs: List[Union[str, List[int]]] = []
        texts: List[Optional[str]] = []
        for i, prompt in enumerate(prompts):
            if isinstance(prompt, dict):
                if "prompt_token_ids" in prompt:
                    prompt = prompt["prompt_token_ids"]
                elif "prompt" in prompt:
                    prompt = prompt["prompt"]
                else:
                    raise ValueError(f"prompts[{i}]: a dict prompt needs 'prompt' or 'prompt_token_ids'")
            if isinstance(prompt, str):
                inputs.append(prompt)
                texts.append(prompt)
            elif _is_token_ids(prompt):
                ids = [int(t) for t in prompt]
                if not ids or any(t < 0 or t >= self._engine.vocab_size for t in ids):
                    raise ValueError(
                        f"prompts[{i}]: token ids must be a non-empty list in [0, {self._engine.vocab_size})"
                    )
                inputs.append(ids)
                texts.append(None)
            else:
                raise ValueError(f"prompts[{i}]: expected a text or a list of token ids, got {type(prompt).__name__}")
        return inputs, texts

    def _generate(
        self,
        inputs: List[Union[str, List[int]]],
        texts: List[Optional[str]],
        sampling_params: Optional[Union[SamplingParams, Sequence[SamplingParams]]],
        use_tqdm: Union[bool, Callable[..., Any]],
    ) -> List[RequestOutput]:
        params = self._resolve_params(sampling_params, len(inputs))
        params_json = [p.request_json() for p in params]
        bar = _make_progress_bar(use_tqdm, len(inputs))
        try:
            results = self._engine.generate(
                inputs,
                params_json,
                on_prompt_finished=bar.update if bar is not None else None,
                engine_progress=bool(use_tqdm) and bar is None and len(inputs) > 1,
            )
        finally:
            if bar is not None:
                bar.close()
        return [
            self._request_output(result, text, params[i if len(params) > 1 else 0])
            for i, (result, text) in enumerate(zip(results, texts))
        ]

    def _request_output(self, result: Any, prompt: Optional[str], params: SamplingParams) -> RequestOutput:
        outputs = []
        for sample in result.outputs:
            logprobs = self._sample_logprobs(sample.token_ids, sample.logprobs, sample.top_logprobs, params)
            outputs.append(
                CompletionOutput(
                    index=sample.index,
                    text=sample.text,
                    token_ids=list(sample.token_ids),
                    cumulative_logprob=sum(sample.logprobs) if params.logprobs is not None else None,
                    logprobs=logprobs,
                    finish_reason=sample.finish_reason or None,
                    stop_reason=_stop_reason(sample.stop_reason, params),
                )
            )
        prompt_logprobs: Optional[PromptLogprobs] = None
        if params.prompt_logprobs is not None:
            prompt_logprobs = [
                None
                if chosen is None
                else self._position_logprobs(token, chosen, top)
                for token, chosen, top in zip(result.prompt_token_ids, result.prompt_token_logprobs, result.prompt_logprobs)
            ]
        return RequestOutput(
            request_id=self._next_request_id(),
            prompt=prompt,
            prompt_token_ids=list(result.prompt_token_ids),
            prompt_logprobs=prompt_logprobs,
            outputs=outputs,
            finished=True,
            num_cached_tokens=result.num_cached_tokens,
        )

    def _sample_logprobs(
        self, token_ids: Sequence[int], chosen: Sequence[float], top: Sequence[Any], params: SamplingParams
    ) -> Optional[SampleLogprobs]:
        if params.logprobs is None:
            return None
        return [self._position_logprobs(t, lp, entries) for t, lp, entries in zip(token_ids, chosen, top)]

    def _position_logprobs(self, token_id: int, logprob: float, top: Sequence[Any]) -> Dict[int, Logprob]:
        """vLLM's per-position dict: the chosen token, then the most likely ones by rank."""
        decode = self._decode_token
        ranks = {entry.token_id: rank for rank, entry in enumerate(top, start=1)}
        position = {token_id: Logprob(logprob, ranks.get(token_id), decode(token_id))}
        for entry in top:
            if entry.token_id not in position:
                position[entry.token_id] = Logprob(entry.logprob, ranks[entry.token_id], decode(entry.token_id))
        return position

    def _decode_token(self, token_id: int) -> Optional[str]:
        if not self._engine.has_tokenizer:
            return None
        return self.get_tokenizer().decode([token_id], skip_special_tokens=False)


class RequestStream:
    """Iterator of one request's RequestOutput deltas (LLM.stream). Closing it (or leaving its with
    block, or dropping it) aborts what is unfinished and frees the engine for other calls."""

    def __init__(self, llm: LLM, prompt: Union[str, List[int]], text: Optional[str], params: SamplingParams) -> None:
        self._llm = llm
        self._params = params
        self._text = text
        self._request_id = llm._next_request_id()
        self._native = llm._engine.stream(prompt, params.request_json())
        self._num_unfinished = params.n

    def __iter__(self) -> Iterator[RequestOutput]:
        return self

    def __next__(self) -> RequestOutput:
        delta = self._native.next()
        if delta is None:
            raise StopIteration
        if delta.finished:
            self._num_unfinished -= 1
        llm, params = self._llm, self._params
        output = CompletionOutput(
            index=delta.index,
            text=delta.text,
            token_ids=list(delta.token_ids),
            cumulative_logprob=None,
            logprobs=llm._sample_logprobs(delta.token_ids, delta.logprobs, delta.top_logprobs, params),
            finish_reason=delta.finish_reason or None,
            stop_reason=_stop_reason(delta.stop_reason, params),
        )
        return RequestOutput(
            request_id=self._request_id,
            prompt=self._text,
            prompt_token_ids=list(self._native.prompt_token_ids),
            prompt_logprobs=None,
            outputs=[output],
            finished=self._num_unfinished == 0,
            num_cached_tokens=self._native.num_cached_tokens,
        )

    def close(self) -> None:
        self._native.close()

    def __enter__(self) -> "RequestStream":
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()


def _is_token_ids(value: Any) -> bool:
    return isinstance(value, Sequence) and not isinstance(value, str) and all(
        isinstance(t, int) and not isinstance(t, bool) for t in value
    )


def _is_conversation(value: Any) -> bool:
    return isinstance(value, Sequence) and not isinstance(value, str) and len(value) > 0 and all(
        isinstance(m, dict) for m in value
    )


def _stop_reason(reason: str, params: SamplingParams) -> Union[int, str, None]:
    """vLLM's stop_reason: the stop string, or the stop token id as an int; None for eos."""
    if not reason:
        return None
    if reason not in params.stop_strings and reason.isdigit() and int(reason) in (params.stop_token_ids or []):
        return int(reason)
    return reason


def _make_progress_bar(use_tqdm: Union[bool, Callable[..., Any]], total: int) -> Optional[Any]:
    """A tqdm-like bar (update(n), close()) over the prompts, or None for the engine's own bar."""
    if not use_tqdm or total < 2:
        return None
    if callable(use_tqdm):
        return use_tqdm(total=total, desc="Processed prompts")
    try:
        from tqdm import tqdm
    except ImportError:
        return None
    return tqdm(total=total, desc="Processed prompts", dynamic_ncols=True)
