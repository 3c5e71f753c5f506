"""Tokenizer: a model's tokenizer.json and its chat template, with Hugging Face's method names.

Chat templates are rendered by the engine's native renderer of the model's family (DeepSeek,
Qwen3, Llama 3, GPT-OSS), byte-identical to the model's own Jinja template; text in messages is
never encoded as a special token.
"""

from __future__ import annotations

import json
from typing import Any, Dict, List, Optional, Sequence, Union

from deepinfer import _core

Conversation = List[Dict[str, Any]]


class Tokenizer:
    """Thread-safe; load with LLM.get_tokenizer() or Tokenizer(model_dir)."""

    def __init__(self, model_dir: str) -> None:
        self._native = _core.Tokenizer(str(model_dir))

    @property
    def vocab_size(self) -> int:
        return self._native.vocab_size

    @property
    def bos_token_id(self) -> Optional[int]:
        return self._native.bos_token_id

    @property
    def eos_token_id(self) -> Optional[int]:
        return self._native.eos_token_id

    def encode(self, text: str, add_special_tokens: bool = True) -> List[int]:
        """Token ids of text; add_special_tokens adds what the model's post-processor adds (BOS)."""
        return self._native.encode(text, add_special_tokens)

    def decode(self, token_ids: Sequence[int], skip_special_tokens: bool = True) -> str:
        return self._native.decode(list(token_ids), skip_special_tokens)

    def convert_ids_to_tokens(self, ids: Sequence[int]) -> List[Optional[str]]:
        return [self._native.id_to_token(i) for i in ids]

    def convert_tokens_to_ids(self, tokens: Sequence[str]) -> List[Optional[int]]:
        return [self._native.token_to_id(t) for t in tokens]

    def apply_chat_template(
        self,
        conversation: Conversation,
        tools: Optional[List[Dict[str, Any]]] = None,
        add_generation_prompt: bool = False,
        tokenize: bool = True,
        **template_kwargs: Any,
    ) -> Union[str, List[int]]:
        """The conversation as the model's chat template renders it: token ids (tokenize=True) or
        text. template_kwargs are the template's variables (enable_thinking, reasoning_effort, ...)."""
        text, ids = self.render_chat(conversation, tools, add_generation_prompt, template_kwargs)
        return ids if tokenize else text

    def render_chat(
        self,
        conversation: Conversation,
        tools: Optional[List[Dict[str, Any]]],
        add_generation_prompt: bool,
        chat_template_kwargs: Optional[Dict[str, Any]],
    ) -> "tuple[str, List[int]]":
        """(prompt text, prompt token ids) of one conversation."""
        request: Dict[str, Any] = {"messages": conversation, "add_generation_prompt": add_generation_prompt}
        if tools is not None:
            request["tools"] = tools
        if chat_template_kwargs:
            request["chat_template_kwargs"] = chat_template_kwargs
        try:
            request_json = json.dumps(request)
        except TypeError as error:
            raise ValueError(f"chat request: {error}") from None
        return self._native.render_chat(request_json)
