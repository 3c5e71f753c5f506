"""Offline batch inference with deepinfer's Python API (vLLM's `LLM.generate` shape).

    PYTHONPATH=build/python python3 examples/offline_inference.py   # after `make python`
    python3 examples/offline_inference.py                            # after `pip install .`

Runs on the embedded default model, a 14M-parameter model trained on Python source; pass a Hugging
Face model directory to LLM(...) for a real model.
"""

from deepinfer import LLM, SamplingParams

prompts = [
    "def fibonacci(n):",
    "import numpy as np\n",
    "class Stack:",
    "# Read a CSV file and print its rows\n",
]
# Seeded sampling: the same text on every run and whatever else is batched with a prompt.
sampling_params = SamplingParams(temperature=0.8, top_p=0.95, max_tokens=48, seed=0)


def main() -> None:
    llm = LLM()  # the embedded default model; LLM("path/to/model") for any other
    outputs = llm.generate(prompts, sampling_params)
    print("-" * 60)
    for output in outputs:
        completion = output.outputs[0]
        print(f"Prompt:    {output.prompt!r}")
        print(f"Generated: {completion.text!r} ({len(completion.token_ids)} tokens, {completion.finish_reason})")
        print("-" * 60)

    # Chat: the conversation goes through the model's own chat template.
    conversation = [{"role": "user", "content": "Write a function that reverses a string"}]
    reply = llm.chat(conversation, SamplingParams(temperature=0, max_tokens=48))[0]
    print(f"Chat reply: {reply.outputs[0].text!r}")

    # Streaming one request: deltas as the engine produces them.
    print("Streamed: ", end="")
    for delta in llm.stream("def quicksort(items):", SamplingParams(temperature=0, max_tokens=32)):
        print(delta.outputs[0].text, end="", flush=True)
    print()


if __name__ == "__main__":
    main()
