// SamplingParams from the sampling fields of an OpenAI-style JSON request (completions, chat,
// and the offline JSONL input), with vLLM's extensions (top_k, min_p, repetition_penalty, ...).
#pragma once

#include <nlohmann/json.hpp>

#include "core/result.h"
#include "deepinfer/sampling_params.h"

namespace deepinfer {

// Reads max_tokens (or max_completion_tokens), temperature, top_p, top_k, min_p, seed, n, stop
// (string or list), stop_token_ids, include_stop_str_in_output, ignore_eos, min_tokens,
// presence_penalty, frequency_penalty, repetition_penalty, logit_bias ({"id": bias}),
// logprobs (an int, or true with top_logprobs), top_logprobs, prompt_logprobs,
// skip_special_tokens, and structured output (response_format, text.format, guided_json,
// guided_regex, guided_grammar, guided_choice; engine/structured_output.h). Other fields are ignored; a known field of the wrong type is an error
// naming it ("field 'temperature' must be a number, got \"hot\""). Ranges are checked later by
// SamplingParams::validate.
Result<SamplingParams> sampling_params_from_json(const nlohmann::json& request, const SamplingParams& defaults = {});

}  // namespace deepinfer
