"""RequestOutput, CompletionOutput and Logprob: vLLM's shapes for what a request produced."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List, Optional, Union

# Per generated (or prompt) token: the chosen token and the most likely ones, by token id.
SampleLogprobs = List[Dict[int, "Logprob"]]
PromptLogprobs = List[Optional[Dict[int, "Logprob"]]]


@dataclass
class Logprob:
    """A token's log-probability under the model's raw distribution (before penalties, bias,
    temperature and filters, as vLLM returns by default); rank is its place among the most likely
    tokens (1 = most likely), None when it is not among those returned."""

    logprob: float
    rank: Optional[int] = None
    decoded_token: Optional[str] = None


@dataclass
class CompletionOutput:
    """One sample of a request: its text and token ids (all of them, or in a stream the new
    ones), and why it stopped: finish_reason "stop" / "length" / "abort" (None while running);
    stop_reason the stop string (str) or stop token id (int) that ended it, None for eos."""

    index: int
    text: str
    token_ids: List[int]
    cumulative_logprob: Optional[float]
    logprobs: Optional[SampleLogprobs]
    finish_reason: Optional[str] = None
    stop_reason: Union[int, str, None] = None

    def finished(self) -> bool:
        return self.finish_reason is not None


@dataclass
class RequestOutput:
    """What one prompt produced: prompt is the text given or rendered (None for token ids),
    outputs one CompletionOutput per sample (SamplingParams.n), num_cached_tokens the prompt
    tokens served from the prefix cache."""

    request_id: str
    prompt: Optional[str]
    prompt_token_ids: List[int]
    prompt_logprobs: Optional[PromptLogprobs]
    outputs: List[CompletionOutput]
    finished: bool
    num_cached_tokens: int = 0
