"""Type stubs of deepinfer's native module (python/src/*.cpp). Use the package's API instead:
deepinfer.LLM, SamplingParams and Tokenizer wrap these."""

from typing import Callable, List, Optional, Sequence, Tuple, Union

__version__: str

def check_sampling_params(fields_json: str) -> None:
    """Raises ValueError naming the first sampling field out of range."""

def serve(args: Sequence[str]) -> int:
    """Runs `deepinfer serve ARGS...` in this process; returns its exit code."""

class TopLogprob:
    token_id: int
    logprob: float

class SampleResult:
    index: int
    token_ids: List[int]
    text: str
    logprobs: List[float]
    top_logprobs: List[List[TopLogprob]]
    finish_reason: str
    stop_reason: str

class GenerationResult:
    prompt_token_ids: List[int]
    outputs: List[SampleResult]
    num_cached_tokens: int
    prompt_logprobs: List[Optional[List[TopLogprob]]]
    prompt_token_logprobs: List[Optional[float]]

class StreamDelta:
    index: int
    token_ids: List[int]
    text: str
    logprobs: List[float]
    top_logprobs: List[List[TopLogprob]]
    finished: bool
    finish_reason: str
    stop_reason: str

class Stream:
    prompt_token_ids: List[int]
    num_cached_tokens: int
    def next(self) -> Optional[StreamDelta]: ...
    def close(self) -> None: ...

class Engine:
    vocab_size: int
    has_tokenizer: bool
    def __init__(
        self,
        model_dir: str,
        device: str,
        max_num_seqs: int,
        max_num_batched_tokens: int,
        max_model_len: int,
        kv_cache_bytes: int,
        gpu_memory_utilization: float,
        batch_invariant: bool,
        enable_prefix_caching: bool,
        speculative_tokens: int,
        show_progress: bool,
    ) -> None: ...
    def generate(
        self,
        prompts: Sequence[Union[str, List[int]]],
        params_json: Sequence[str],
        on_prompt_finished: Optional[Callable[[int], object]],
        engine_progress: bool,
    ) -> List[GenerationResult]: ...
    def stream(self, prompt: Union[str, List[int]], params_json: str) -> Stream: ...

class Tokenizer:
    vocab_size: int
    bos_token_id: Optional[int]
    eos_token_id: Optional[int]
    def __init__(self, model_dir: str) -> None: ...
    def encode(self, text: str, add_special_tokens: bool) -> List[int]: ...
    def decode(self, token_ids: List[int], skip_special_tokens: bool) -> str: ...
    def render_chat(self, request_json: str) -> Tuple[str, List[int]]: ...
    def token_to_id(self, token: str) -> Optional[int]: ...
    def id_to_token(self, id: int) -> Optional[str]: ...
