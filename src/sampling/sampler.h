// Token selection from logits: greedy, temperature with top-k / top-p / min-p, and logprobs.
// Sampling is deterministic: the uniform draw for a token is a hash of (request seed, absolute
// position, sample index), and the token is the first whose float64 cumulative probability,
// summed over the kept candidates in token-id order, exceeds it; equal logits give equal tokens
// whatever the batch, its order, the chunking or the thread count.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "core/result.h"

namespace deepinfer {

struct SamplingParams {
  double temperature = 1.0;  // 0: greedy
  double top_p = 1.0;        // (0, 1]
  int32_t top_k = 0;         // 0: off
  double min_p = 0.0;        // [0, 1]
  uint64_t seed = 0;

  // Errors name the parameter and its valid range.
  Result<void> validate() const;
};

// The highest logit; the lowest id among equal maxima.
int32_t argmax(const float* logits, int64_t vocab_size);

// log_softmax over the full vocabulary in float64.
std::vector<double> log_softmax(const float* logits, int64_t vocab_size);

// The k most likely (id, logprob) pairs, logprob descending, ids ascending among ties.
std::vector<std::pair<int32_t, double>> top_logprobs(const float* logits, int64_t vocab_size, int32_t k);

// A uniform double in [0, 1) from 53 bits of a hash of (seed, position, sample_index).
double deterministic_uniform(uint64_t seed, int64_t position, int32_t sample_index = 0);

// Picks the token for absolute sequence position `position` (the index the token will have);
// sample_index tells apart the n > 1 samples of one request.
int32_t sample_token(const float* logits, int64_t vocab_size, const SamplingParams& params, int64_t position,
                     int32_t sample_index = 0);

}  // namespace deepinfer
