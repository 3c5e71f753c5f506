// The reference sampler (kernels/ops.h sample_rows), also the engine's host sampler through
// sampling/sampler.h: candidate filtering in vLLM's order, then one draw searched in the float64
// cumulative distribution over the survivors in token-id order. Each step is linear in the
// vocabulary (selection, never a full sort), as it runs once per sequence per step.
#include <algorithm>
#include <bit>
#include <cmath>
#include <functional>
#include <vector>

#include "core/check.h"
#include "kernels/exp_f64.h"
#include "kernels/ops.h"

namespace deepinfer::kernels::ref {
namespace {

// The highest logit; the lowest id among equal maxima.
int32_t argmax(const float* logits, int64_t vocab_size) {
  int64_t best = 0;
  for (int64_t i = 1; i < vocab_size; ++i) {
    if (logits[i] > logits[best]) best = i;
  }
  return static_cast<int32_t>(best);
}

// A token's rank as one integer, in the filters' order: logit descending, then id ascending. A
// strict total order, so what is kept never depends on how a selection is carried out.
uint64_t rank_key(float logit, int32_t id) {
  const uint32_t bits = std::bit_cast<uint32_t>(logit + 0.0f);  // -0 becomes +0, equal as floats
  const uint32_t ordered = (bits & 0x80000000u) != 0 ? ~bits : bits | 0x80000000u;
  return (static_cast<uint64_t>(ordered) << 32) | (0xffffffffu - static_cast<uint32_t>(id));
}

size_t key_id(uint64_t key) { return 0xffffffffu - static_cast<uint32_t>(key); }

// Takes tokens most likely first, keeping each while the weight of those taken before it is
// below `limit`, and zeroes the probability of the rest. Weights are integers, so the sums do
// not depend on their order: one pass totals the weight per bucket of the top 12 key bits, and
// only the bucket where the limit falls is sorted. Linear in the vocabulary.
template <typename Weight>
void keep_most_likely(const float* logits, std::vector<double>& probs, Weight weight, uint64_t limit) {
  constexpr int kBucketShift = 52;
  const auto vocab_size = static_cast<int32_t>(probs.size());
  std::vector<uint64_t> bucket_weight(size_t{1} << (64 - kBucketShift), 0);
  for (int32_t i = 0; i < vocab_size; ++i) {
    if (probs[size_t(i)] > 0.0) bucket_weight[rank_key(logits[i], i) >> kBucketShift] += weight(probs[size_t(i)]);
  }
  uint64_t before = 0;
  size_t boundary = bucket_weight.size();
  while (boundary > 0 && before + bucket_weight[boundary - 1] < limit) before += bucket_weight[--boundary];
  if (boundary == 0) return;  // everything fits under the limit
  --boundary;
  std::vector<uint64_t> members;
  for (int32_t i = 0; i < vocab_size; ++i) {
    const uint64_t key = rank_key(logits[i], i);
    if (probs[size_t(i)] > 0.0 && key >> kBucketShift == boundary) members.push_back(key);
  }
  std::sort(members.begin(), members.end(), std::greater<>());
  // The bucket's first member is always kept: the weight before it is below the limit.
  uint64_t min_kept_key = members.front();
  for (uint64_t key : members) {
    if (before >= limit) break;
    min_kept_key = key;
    before += weight(probs[key_id(key)]);
  }
  for (int32_t i = 0; i < vocab_size; ++i) {
    if (rank_key(logits[i], i) < min_kept_key) probs[size_t(i)] = 0.0;
  }
}

// top_p as vLLM defines it: a token stays iff the renormalised mass of the tokens more likely
// than it is < top_p. Masses are integers: probability in units of 2^-40 of the most likely
// token's, so the total fits 64 bits for vocabularies below 2^24 tokens.
void keep_top_p(const float* logits, std::vector<double>& probs, double top_p) {
  DI_CHECK(probs.size() < (size_t{1} << 24), "vocabulary of " << probs.size() << " tokens");
  auto units = [](double prob) { return static_cast<uint64_t>(prob * 0x1p40); };
  uint64_t total = 0;
  for (double prob : probs) total += units(prob);
  // mass < top_p * total  <=>  mass < ceil(top_p * total). top_p * 2^64 is an integer for
  // top_p >= 2^-11; below, truncating it moves the limit by at most one unit.
  const unsigned __int128 scaled = static_cast<unsigned __int128>(std::ldexp(top_p, 64)) * total;
  const uint64_t limit = static_cast<uint64_t>(scaled >> 64) + (static_cast<uint64_t>(scaled) != 0 ? 1 : 0);
  keep_most_likely(logits, probs, units, limit);
}

// The first token whose float64 cumulative probability, in token-id order, exceeds u * total.
// The sum has two levels, so a device computes the same bits in parallel: each chunk of
// kCdfChunk ids is summed in order from 0, the chunk totals are summed in order, and token i of
// chunk c has cumulative (sum of the chunks before c) + (its chunk's sum up to i). That is
// non-decreasing in i and reaches the total at the last chunk's end. Dropped tokens have
// probability 0 and add nothing.
int32_t inverse_cdf(const std::vector<double>& probs, double u) {
  constexpr auto kChunk = static_cast<size_t>(kCdfChunk);
  const size_t num_chunks = (probs.size() + kChunk - 1) / kChunk;
  std::vector<double> chunk_sum(num_chunks, 0.0);
  for (size_t i = 0; i < probs.size(); ++i) chunk_sum[i / kChunk] += probs[i];
  std::vector<double> before(num_chunks);
  double total = 0.0;
  for (size_t c = 0; c < num_chunks; ++c) {
    before[c] = total;
    total += chunk_sum[c];
  }
  const double target = u * total;
  for (size_t c = 0; c < num_chunks; ++c) {
    if (!(target < before[c] + chunk_sum[c])) continue;
    double within = 0.0;
    for (size_t i = c * kChunk; i < std::min(probs.size(), (c + 1) * kChunk); ++i) {
      within += probs[i];
      if (target < before[c] + within) return static_cast<int32_t>(i);
    }
  }
  // u * total can round up to total itself: the last token that can be drawn.
  size_t last = probs.size() - 1;
  while (probs[last] == 0.0) --last;
  return static_cast<int32_t>(last);
}

int32_t sample_row(const float* logits, int64_t vocab_size, const SampleParams& params) {
  if (params.temperature == 0.0 || params.top_k == 1) return argmax(logits, vocab_size);
  const double max_logit = logits[argmax(logits, vocab_size)];
  DI_CHECK(std::isfinite(max_logit), "no finite logit to sample from (max " << max_logit << ")");

  // Temperature, with the most likely token at exactly 1; exp_f64, so the device sampler's bits match.
  std::vector<double> probs(static_cast<size_t>(vocab_size));
  for (int64_t i = 0; i < vocab_size; ++i) {
    probs[static_cast<size_t>(i)] = exp_f64((static_cast<double>(logits[i]) - max_logit) / params.temperature);
  }
  // vLLM's order: min_p (p >= min_p * p_max), then top_k, then top_p over what is left. A
  // dropped token's probability becomes 0.
  if (params.min_p > 0.0) {
    for (double& prob : probs) prob = prob >= params.min_p ? prob : 0.0;
  }
  if (params.top_k > 0 && params.top_k < vocab_size) {
    keep_most_likely(logits, probs, [](double) { return uint64_t{1}; }, static_cast<uint64_t>(params.top_k));
  }
  if (params.top_p < 1.0) keep_top_p(logits, probs, params.top_p);
  return inverse_cdf(probs, params.u);
}

}  // namespace

void sample_rows(const float* logits, int64_t vocab, const SampleParams* params, int64_t num_draws,
                 int32_t* token_ids) {
  DI_CHECK(vocab > 0, "vocab_size " << vocab);
  for (int64_t i = 0; i < num_draws; ++i) {
    token_ids[i] = sample_row(logits + static_cast<int64_t>(params[i].row) * vocab, vocab, params[i]);
  }
}

void gather_rows(const int32_t* src, const int32_t* row_of, int64_t num_rows, int64_t width, int32_t* dst) {
  for (int64_t r = 0; r < num_rows; ++r) {
    const int64_t from = row_of != nullptr ? row_of[r] : r;
    if (from >= 0) std::copy_n(src + from * width, width, dst + r * width);
  }
}

}  // namespace deepinfer::kernels::ref
