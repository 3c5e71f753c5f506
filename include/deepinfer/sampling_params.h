// SamplingParams: how one request's tokens are chosen and when its generation stops. Field names
// and meanings follow the OpenAI API and vLLM's SamplingParams, so a JSON request maps onto it
// field by field.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/result.h"

namespace deepinfer {

// Constrains the output to a JSON Schema, any JSON object, a regex, an EBNF grammar (GBNF
// style, docs/structured_output.md) or one of fixed strings; the engine masks every other token
// before sampling, so the output matches by construction (unless max_tokens cuts it short).
struct StructuredOutputParams {
  // kStructural: markup, marker-free text and JSON values composed (grammar/structural.h); the
  // API layer builds it for tool calls in the model's own markup.
  enum class Kind : uint8_t { kJsonSchema, kJsonObject, kRegex, kGrammar, kChoice, kStructural };
  Kind kind = Kind::kJsonObject;
  std::string spec;                  // the schema (JSON text), regex, grammar or structural spec
  std::vector<std::string> choices;  // kChoice
  // Schema keywords the engine cannot enforce are errors; false drops them (with warnings).
  bool strict = true;
  // Whitespace bytes allowed between JSON tokens (0: compact JSON).
  int32_t max_whitespace = 0;
};

struct SamplingParams {
  // Number of output sequences to generate from the prompt (>= 1). They share the prompt's KV
  // blocks and differ only in their sample index, which is part of every draw.
  int32_t n = 1;

  // Divides the logits before the softmax (>= 0). Lower is more deterministic; 0 is greedy
  // (argmax of the processed logits, lowest token id among equal maxima).
  double temperature = 1.0;
  // Nucleus sampling: keeps the most likely tokens whose cumulative probability reaches top_p,
  // in (0, 1]; 1 keeps all.
  double top_p = 1.0;
  // Keeps the top_k most likely tokens; 0 or -1 keeps all.
  int32_t top_k = 0;
  // Keeps tokens whose probability is at least min_p times the most likely token's, in [0, 1];
  // 0 keeps all.
  double min_p = 0.0;
  // The request's random seed. Every draw is a hash of (seed, absolute position, sample index),
  // so the same seed gives the same tokens whatever the batch. Unset: the engine derives one
  // from the request id.
  std::optional<uint64_t> seed;

  // Subtracted from the logit of every token that already appears in the output, in [-2, 2].
  // Positive values push the model towards new tokens.
  double presence_penalty = 0.0;
  // Subtracted once per earlier occurrence in the output, in [-2, 2]. Positive values make
  // verbatim repetition less likely.
  double frequency_penalty = 0.0;
  // Multiplicative penalty on every token that appears in the prompt or the output (> 0; 1 is
  // off): a positive logit is divided by it, a negative one multiplied.
  double repetition_penalty = 1.0;
  // Added to the logits of the given token ids before sampling; values in [-100, 100]. -100
  // effectively bans a token, 100 effectively forces it.
  std::map<int32_t, float> logit_bias;

  // Generation stops when the output text contains one of these strings (none may be empty).
  // The stop string is not part of the returned text unless include_stop_str_in_output.
  std::vector<std::string> stop;
  // Generation stops when one of these tokens is sampled (as with eos). The token is part of
  // the output token ids; its text is left out of the output text unless
  // include_stop_str_in_output.
  std::vector<int32_t> stop_token_ids;
  // Whether the matched stop string (or the stop token's text) stays in the output text.
  bool include_stop_str_in_output = false;
  // Keep generating after the model's end-of-sequence token (used for benchmarks).
  bool ignore_eos = false;

  // The most tokens to generate (>= 0; 0 only runs the prompt, e.g. for prompt_logprobs). The
  // engine also stops at the model's context length.
  int32_t max_tokens = 16;
  // The fewest tokens to generate before eos, stop_token_ids or stop strings may end the
  // sequence, in [0, max_tokens].
  int32_t min_tokens = 0;

  // Number of most likely tokens to return with each generated token's logprob, in [0, 20];
  // unset returns no logprobs. The chosen token's logprob is always returned alongside. The
  // logprobs are of the model's raw distribution (before penalties, bias, temperature and
  // filters), as vLLM returns them by default.
  std::optional<int32_t> logprobs;
  // The same for every prompt token (the first has none: nothing precedes it), in [0, 20].
  std::optional<int32_t> prompt_logprobs;
  // Whether special tokens (eos, chat markers) are left out of the output text.
  bool skip_special_tokens = true;

  // Structured output (response_format, guided_json / guided_regex / guided_grammar /
  // guided_choice); unset leaves the output unconstrained.
  std::optional<StructuredOutputParams> structured_output;

  // Checks every field against its documented range; vocab_size bounds the token ids of
  // logit_bias and stop_token_ids. The error names the field, the value and the valid range.
  Result<void> validate(int64_t vocab_size) const;
};

}  // namespace deepinfer
