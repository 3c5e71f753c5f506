// The logits processors that depend on a request's history, applied in vLLM's order before the
// sampler: min_tokens, logit_bias, then the repetition, frequency and presence penalties.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "deepinfer/sampling_params.h"

namespace deepinfer {

// Rewrites logits ([vocab] f32, the row that picks the next output token) in place:
//  1. min_tokens: while output_tokens has fewer than params.min_tokens entries, eos_ids and
//     params.stop_token_ids get -inf (eos_ids even with ignore_eos, as vLLM does).
//  2. logit_bias: each bias is added to its token's logit.
//  3. repetition_penalty (if != 1), once per distinct token of prompt_tokens and output_tokens:
//     a positive logit is divided by it, any other multiplied.
//  4. frequency_penalty * (occurrences in output_tokens) is subtracted, then
//  5. presence_penalty is subtracted from every token present in output_tokens.
// Arithmetic is float32, in this order, like vLLM's. params must have passed validate(vocab), and
// every token id in the spans and eos_ids must be in [0, vocab). Stateless; thread-safe.
void apply_logits_processors(float* logits, int64_t vocab, const SamplingParams& params,
                             std::span<const int32_t> prompt_tokens, std::span<const int32_t> output_tokens,
                             const std::vector<int32_t>& eos_ids);

// Whether apply_logits_processors can change a logit of a request that has num_output_tokens
// outputs; when not, its raw logits are what the sampler sees (a device can sample them).
bool logits_processors_active(const SamplingParams& params, size_t num_output_tokens);

}  // namespace deepinfer
