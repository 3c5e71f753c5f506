"""SamplingParams and structured-output parameters, with vLLM's field names and defaults.

Each field maps onto the engine's own request fields (the OpenAI / vLLM names its server and
`deepinfer generate --input` read), so the engine checks them with the same rules and messages.
"""

from __future__ import annotations

import copy
import json
import math
from dataclasses import dataclass, field, fields
from typing import Any, Dict, List, Optional, Union

from deepinfer import _core

# vLLM's max_tokens=None: as many tokens as the context leaves (the engine stops there).
_UNBOUNDED_MAX_TOKENS = 2**31 - 1


@dataclass
class GuidedDecodingParams:
    """Constrains the output to a JSON Schema, any JSON object, a regex, an EBNF grammar or one of
    fixed strings (vLLM's GuidedDecodingParams / StructuredOutputsParams). Give exactly one.

    The engine masks every other token before sampling, so the output matches by construction
    unless max_tokens cuts it short. docs/structured_output.md lists what each form supports.
    """

    json: Optional[Union[str, Dict[str, Any]]] = None
    regex: Optional[str] = None
    choice: Optional[List[str]] = None
    grammar: Optional[str] = None
    json_object: Optional[bool] = None

    def __post_init__(self) -> None:
        given = [name for name in ("json", "regex", "choice", "grammar", "json_object") if getattr(self, name)]
        if len(given) != 1:
            raise ValueError(
                "structured output: give exactly one of json, regex, choice, grammar, json_object"
                + (f" (got {', '.join(given)})" if given else "")
            )

    def request_fields(self) -> Dict[str, Any]:
        """The engine's request fields (vLLM's guided_* names) for this constraint."""
        if self.json is not None:
            return {"guided_json": self.json}
        if self.regex is not None:
            return {"guided_regex": self.regex}
        if self.choice is not None:
            return {"guided_choice": list(self.choice)}
        if self.grammar is not None:
            return {"guided_grammar": self.grammar}
        return {"response_format": {"type": "json_object"}}


class StructuredOutputsParams(GuidedDecodingParams):
    """vLLM's newer name for GuidedDecodingParams (SamplingParams.structured_outputs)."""


@dataclass
class SamplingParams:
    """How one request's tokens are chosen and when it stops; vLLM's names and defaults.

    Raises ValueError naming the field when a value is out of range (token ids are checked
    against the model's vocabulary when the request runs). Draws are a hash of (seed, position,
    sample index), so a seeded request gives the same tokens whatever else is in the batch.
    """

    n: int = 1
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    repetition_penalty: float = 1.0
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    min_p: float = 0.0
    seed: Optional[int] = None
    stop: Optional[Union[str, List[str]]] = None
    stop_token_ids: Optional[List[int]] = None
    ignore_eos: bool = False
    max_tokens: Optional[int] = 16
    min_tokens: int = 0
    logprobs: Optional[int] = None
    prompt_logprobs: Optional[int] = None
    skip_special_tokens: bool = True
    include_stop_str_in_output: bool = False
    logit_bias: Optional[Dict[int, float]] = None
    guided_decoding: Optional[GuidedDecodingParams] = None
    structured_outputs: Optional[GuidedDecodingParams] = None

    def __post_init__(self) -> None:
        _core.check_sampling_params(self.request_json())

    def clone(self) -> "SamplingParams":
        return copy.deepcopy(self)

    @property
    def stop_strings(self) -> List[str]:
        if self.stop is None:
            return []
        return [self.stop] if isinstance(self.stop, str) else list(self.stop)

    def request_fields(self) -> Dict[str, Any]:
        """The engine's request fields for these parameters (engine/sampling_json.h)."""
        if self.guided_decoding is not None and self.structured_outputs is not None:
            raise ValueError("give guided_decoding or structured_outputs, not both")
        request: Dict[str, Any] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name in ("guided_decoding", "structured_outputs"):
                if value is not None:
                    if not isinstance(value, GuidedDecodingParams):
                        raise ValueError(f"{f.name} must be a GuidedDecodingParams, got {type(value).__name__}")
                    request.update(value.request_fields())
                continue
            if value is None:
                if f.name == "max_tokens":
                    request["max_tokens"] = _UNBOUNDED_MAX_TOKENS
                continue
            if isinstance(value, float) and not math.isfinite(value):
                raise ValueError(f"{f.name} must be a finite number, got {value}")
            request[f.name] = value
        return request

    def request_json(self) -> str:
        try:
            return json.dumps(self.request_fields(), allow_nan=False)
        except (TypeError, ValueError) as error:  # a value JSON cannot hold: a set, a NaN in logit_bias
            raise ValueError(f"sampling params: {error}") from None
