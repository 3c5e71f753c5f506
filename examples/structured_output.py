"""Structured output with deepinfer's Python API: the engine masks every token that would leave
the constraint, so the text matches a choice, a regex, a JSON Schema or an EBNF grammar by
construction (vLLM's GuidedDecodingParams; StructuredOutputsParams is the same class).

    PYTHONPATH=build/python python3 examples/structured_output.py   # after `make python`
"""

import json
import re

from deepinfer import LLM, GuidedDecodingParams, SamplingParams

CHOICES = ["True", "False"]
EMAIL = r"[a-z]{3,10}@[a-z]{3,8}\.(com|org)"
SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 12},
        "version": {"type": "integer", "minimum": 0, "maximum": 99},
        "license": {"enum": ["MIT", "BSD", "Apache-2.0"]},
    },
    "required": ["name", "version", "license"],
    "additionalProperties": False,
}
# EBNF (GBNF style, docs/structured_output.md): a call of a builtin with one to three small integers.
GRAMMAR = r"""
root ::= name "(" args ")"
name ::= "max" | "min" | "sum" | "range"
args ::= number | number ", " number | number ", " number ", " number
number ::= [0-9] | [1-9] [0-9]
"""


def generate_one(llm: LLM, prompt: str, guided: GuidedDecodingParams) -> str:
    params = SamplingParams(temperature=0, max_tokens=64, guided_decoding=guided)
    output = llm.generate(prompt, params, use_tqdm=False)[0].outputs[0]
    assert output.finish_reason == "stop", f"cut short by max_tokens: {output.text!r}"
    return output.text


def main() -> None:
    llm = LLM()

    answer = generate_one(llm, "is_sorted = ", GuidedDecodingParams(choice=CHOICES))
    assert answer in CHOICES
    print(f"choice:  {answer}")

    email = generate_one(llm, "AUTHOR_EMAIL = '", GuidedDecodingParams(regex=EMAIL))
    assert re.fullmatch(EMAIL, email)
    print(f"regex:   {email}")

    package = json.loads(generate_one(llm, "package_info = ", GuidedDecodingParams(json=SCHEMA)))
    assert set(package) == {"name", "version", "license"}
    print(f"json:    {package}")

    call = generate_one(llm, "result = ", GuidedDecodingParams(grammar=GRAMMAR))
    assert re.fullmatch(r"(max|min|sum|range)\([0-9]+(, [0-9]+){0,2}\)", call)
    print(f"grammar: {call}")


if __name__ == "__main__":
    main()
