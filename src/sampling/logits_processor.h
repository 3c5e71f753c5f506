// The logits processors that depend on a request's history, applied in vLLM's order before the
// sampler: min_tokens, logit_bias, then the repetition, frequency and presence penalties.
#pragma once

#include <cstdint>
#include <span>
#include <unordered_map>
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

// What the repetition, frequency and presence penalties need of a request's history, kept up to
// date as outputs are appended, so applying them costs O(distinct tokens) per step instead of
// O(prompt + outputs). Memory: one bit per vocabulary id plus a few bytes per distinct token.
class PenaltyHistory {
 public:
  // Every id must be in [0, vocab).
  PenaltyHistory(int64_t vocab, std::span<const int32_t> prompt_tokens);

  void append_output(int32_t token_id);

  // Steps 3-5 of apply_logits_processors for the tokens seen so far, with the same float results.
  void apply(float* logits, const SamplingParams& params) const;

 private:
  void mark_seen(int32_t token_id);

  int64_t vocab_;
  std::vector<bool> seen_;                              // id in the prompt or the outputs
  std::vector<int32_t> seen_ids_;                       // the ids set in seen_
  std::unordered_map<int32_t, int32_t> output_counts_;  // occurrences in the outputs, by id
};

// apply_logits_processors for a request with num_output_tokens outputs whose history the
// penalties read from penalties (nullptr when params use no penalty).
void apply_logits_processors(float* logits, int64_t vocab, const SamplingParams& params, size_t num_output_tokens,
                             const PenaltyHistory* penalties, const std::vector<int32_t>& eos_ids);

// Whether params set a repetition, frequency or presence penalty (which read the history).
bool uses_penalties(const SamplingParams& params);

// Whether apply_logits_processors can change a logit of a request that has num_output_tokens
// outputs; when not, its raw logits are what the sampler sees (a device can sample them).
bool logits_processors_active(const SamplingParams& params, size_t num_output_tokens);

}  // namespace deepinfer
