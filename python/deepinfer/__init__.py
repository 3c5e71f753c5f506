"""deepinfer: an LLM inference engine in C++20, from Python, with vLLM's offline API.

    from deepinfer import LLM, SamplingParams
    llm = LLM()  # the embedded default model; or LLM("path/to/hf-model-dir")
    outputs = llm.generate(["def fibonacci(n):"], SamplingParams(temperature=0, max_tokens=32))
    print(outputs[0].outputs[0].text)

`python3 -m deepinfer serve ...` runs the OpenAI / Anthropic-compatible server of `deepinfer serve`.
"""

from deepinfer._core import __version__
from deepinfer.llm import DEFAULT_MODEL, LLM, RequestStream
from deepinfer.outputs import CompletionOutput, Logprob, RequestOutput
from deepinfer.sampling_params import GuidedDecodingParams, SamplingParams, StructuredOutputsParams
from deepinfer.tokenizer import Tokenizer

__all__ = [
    "DEFAULT_MODEL",
    "LLM",
    "RequestStream",
    "CompletionOutput",
    "Logprob",
    "RequestOutput",
    "GuidedDecodingParams",
    "SamplingParams",
    "StructuredOutputsParams",
    "Tokenizer",
    "__version__",
]
