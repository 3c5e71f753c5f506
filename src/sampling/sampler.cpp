// Deterministic sampling and logprobs.
#include "sampling/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <string>

namespace deepinfer {

Result<void> SamplingParams::validate() const {
  if (!std::isfinite(temperature) || temperature < 0.0) {
    return Error{"temperature must be a finite number >= 0, got " + std::to_string(temperature)};
  }
  if (!(top_p > 0.0 && top_p <= 1.0)) return Error{"top_p must be in (0, 1], got " + std::to_string(top_p)};
  if (top_k < 0) return Error{"top_k must be >= 0 (0 disables it), got " + std::to_string(top_k)};
  if (!(min_p >= 0.0 && min_p <= 1.0)) return Error{"min_p must be in [0, 1], got " + std::to_string(min_p)};
  return {};
}

int32_t argmax(const float* logits, int64_t vocab_size) {
  int64_t best = 0;
  for (int64_t i = 1; i < vocab_size; ++i) {
    if (logits[i] > logits[best]) best = i;
  }
  return static_cast<int32_t>(best);
}

std::vector<double> log_softmax(const float* logits, int64_t vocab_size) {
  double max_logit = -std::numeric_limits<double>::infinity();
  for (int64_t i = 0; i < vocab_size; ++i) max_logit = std::max(max_logit, static_cast<double>(logits[i]));
  double sum = 0.0;
  for (int64_t i = 0; i < vocab_size; ++i) sum += std::exp(static_cast<double>(logits[i]) - max_logit);
  const double log_sum = max_logit + std::log(sum);
  std::vector<double> out(static_cast<size_t>(vocab_size));
  for (int64_t i = 0; i < vocab_size; ++i) out[static_cast<size_t>(i)] = static_cast<double>(logits[i]) - log_sum;
  return out;
}

std::vector<std::pair<int32_t, double>> top_logprobs(const float* logits, int64_t vocab_size, int32_t k) {
  const std::vector<double> logprobs = log_softmax(logits, vocab_size);
  std::vector<int32_t> ids(static_cast<size_t>(vocab_size));
  std::iota(ids.begin(), ids.end(), 0);
  const auto count = static_cast<size_t>(std::clamp<int64_t>(k, 0, vocab_size));
  std::partial_sort(ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(count), ids.end(),
                    [&](int32_t a, int32_t b) {
                      const double la = logprobs[static_cast<size_t>(a)];
                      const double lb = logprobs[static_cast<size_t>(b)];
                      return la != lb ? la > lb : a < b;
                    });
  std::vector<std::pair<int32_t, double>> top;
  top.reserve(count);
  for (size_t i = 0; i < count; ++i) top.emplace_back(ids[i], logprobs[static_cast<size_t>(ids[i])]);
  return top;
}

namespace {

uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

}  // namespace

double deterministic_uniform(uint64_t seed, int64_t position, int32_t sample_index) {
  // Chained so that each input changes every output bit.
  const uint64_t x = splitmix64(splitmix64(splitmix64(seed) ^ static_cast<uint64_t>(position)) ^
                                static_cast<uint64_t>(static_cast<uint32_t>(sample_index)));
  return static_cast<double>(x >> 11) * 0x1.0p-53;
}

int32_t sample_token(const float* logits, int64_t vocab_size, const SamplingParams& params, int64_t position,
                     int32_t sample_index) {
  if (params.temperature == 0.0 || params.top_k == 1) return argmax(logits, vocab_size);
  // Candidates in a fixed order: probability descending, id ascending.
  std::vector<int32_t> ids(static_cast<size_t>(vocab_size));
  std::iota(ids.begin(), ids.end(), 0);
  std::sort(ids.begin(), ids.end(), [&](int32_t a, int32_t b) {
    return logits[a] != logits[b] ? logits[a] > logits[b] : a < b;
  });
  size_t count = ids.size();
  if (params.top_k > 0) count = std::min(count, static_cast<size_t>(params.top_k));
  const double max_scaled = static_cast<double>(logits[ids[0]]) / params.temperature;
  std::vector<double> probs(count);
  double total = 0.0;
  for (size_t i = 0; i < count; ++i) {
    probs[i] = std::exp(static_cast<double>(logits[ids[i]]) / params.temperature - max_scaled);
    total += probs[i];
  }
  // min_p keeps tokens with p >= min_p * p_max (p_max is probs[0] / total).
  if (params.min_p > 0.0) {
    size_t kept = 1;
    while (kept < count && probs[kept] >= params.min_p * probs[0]) ++kept;
    count = kept;
  }
  // top_p keeps the smallest prefix whose mass reaches top_p.
  double mass = 0.0;
  size_t nucleus = 0;
  while (nucleus < count) {
    mass += probs[nucleus] / total;
    ++nucleus;
    if (mass >= params.top_p) break;
  }
  count = nucleus;
  // The cumulative distribution runs over the kept candidates in token-id order.
  std::vector<std::pair<int32_t, double>> kept(count);
  for (size_t i = 0; i < count; ++i) kept[i] = {ids[i], probs[i]};
  std::sort(kept.begin(), kept.end());
  double kept_total = 0.0;
  for (const auto& candidate : kept) kept_total += candidate.second;
  const double target = deterministic_uniform(params.seed, position, sample_index) * kept_total;
  double cumulative = 0.0;
  for (const auto& [id, prob] : kept) {
    cumulative += prob;
    if (target < cumulative) return id;
  }
  return kept.back().first;
}

}  // namespace deepinfer
