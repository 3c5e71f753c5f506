// Deterministic sampling: the draw is a hash of (seed, position, sample index); the choice is
// kernels::ref::sample_rows (kernels/ref/sampling.cpp), the oracle of every device sampler too.
#include "sampling/sampler.h"

#include "core/check.h"
#include "kernels/ops.h"

namespace deepinfer {
namespace {

uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

}  // namespace

int32_t argmax(const float* logits, int64_t vocab_size) {
  int64_t best = 0;
  for (int64_t i = 1; i < vocab_size; ++i) {
    if (logits[i] > logits[best]) best = i;
  }
  return static_cast<int32_t>(best);
}

double deterministic_uniform(uint64_t seed, int64_t position, int32_t sample_index) {
  // Chained so that each input changes every output bit.
  const uint64_t x = splitmix64(splitmix64(splitmix64(seed) ^ static_cast<uint64_t>(position)) ^
                                static_cast<uint64_t>(static_cast<uint32_t>(sample_index)));
  return static_cast<double>(x >> 11) * 0x1.0p-53;
}

int32_t sample_token(const float* logits, int64_t vocab_size, const SamplingParams& params, uint64_t seed,
                     int64_t position, int32_t sample_index) {
  int32_t token = 0;
  const kernels::SampleParams draw = sample_params(params, seed, position, sample_index);
  kernels::ref::sample_rows(logits, vocab_size, &draw, 1, &token);
  return token;
}

kernels::SampleParams sample_params(const SamplingParams& params, uint64_t seed, int64_t position,
                                    int32_t sample_index, int32_t row) {
  kernels::SampleParams draw;
  draw.row = row;
  draw.top_k = params.top_k;
  draw.temperature = params.temperature;
  draw.top_p = params.top_p;
  draw.min_p = params.min_p;
  const bool greedy = params.temperature == 0.0 || params.top_k == 1;
  draw.u = greedy ? 0.0 : deterministic_uniform(seed, position, sample_index);
  return draw;
}

int32_t sample_token(const float* logits, int64_t vocab_size, const SamplingParams& params, int64_t position,
                     int32_t sample_index) {
  if (params.temperature == 0.0 || params.top_k == 1) return argmax(logits, vocab_size);
  DI_CHECK(params.seed.has_value(), "sampling needs a seed; the engine sets one from the request id");
  return sample_token(logits, vocab_size, params, *params.seed, position, sample_index);
}

}  // namespace deepinfer
