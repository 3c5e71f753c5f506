// Token selection from processed logits: greedy, or temperature with min-p / top-k / top-p.
// Sampling is deterministic: the uniform draw for a token is a hash of (request seed, absolute
// position, sample index), and the token is the first whose float64 cumulative probability,
// summed over the kept candidates in token-id order (per kernels::kCdfChunk ids, then over the
// chunks), exceeds it; equal logits give equal tokens whatever the batch, its order, the chunking,
// the thread count or the backend (kernels::ref::sample_rows). Stateless and thread-safe.
#pragma once

#include <cstdint>

#include "deepinfer/sampling_params.h"
#include "kernels/ops.h"

namespace deepinfer {

// The highest logit; the lowest id among equal maxima.
int32_t argmax(const float* logits, int64_t vocab_size);

// A uniform double in [0, 1) from the top 53 bits of a hash of (seed, position, sample_index).
double deterministic_uniform(uint64_t seed, int64_t position, int32_t sample_index = 0);

// Picks the token for absolute sequence position `position` (the index the token will have) of
// sample `sample_index` (0..n-1) of a request seeded with `seed`. logits: [vocab_size] f32 after
// apply_logits_processors, at least one finite. Follows vLLM's order: temperature, then min_p,
// then top_k, then top_p over what is left; temperature 0 or top_k 1 is argmax.
int32_t sample_token(const float* logits, int64_t vocab_size, const SamplingParams& params, uint64_t seed,
                     int64_t position, int32_t sample_index);

// The filter settings and the draw of sample_token(..., seed, position, sample_index) as one
// kernels::sample_rows draw of logits row `row`: a backend's sample_rows then picks the same token.
kernels::SampleParams sample_params(const SamplingParams& params, uint64_t seed, int64_t position,
                                    int32_t sample_index, int32_t row = 0);

// The same with the seed taken from params.seed, which must be set unless the choice is greedy
// (the engine resolves an unset seed from the request id before sampling).
int32_t sample_token(const float* logits, int64_t vocab_size, const SamplingParams& params, int64_t position,
                     int32_t sample_index = 0);

}  // namespace deepinfer
