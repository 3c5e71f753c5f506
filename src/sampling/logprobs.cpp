// Log-probabilities: one log-sum-exp per row, top-k by a single pass over the vocabulary.
#include "sampling/logprobs.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "core/check.h"

namespace deepinfer {
namespace {

// log(sum(exp(logits))) in float64, shifted by the maximum so no term overflows.
double log_sum_exp(const float* logits, int64_t vocab_size) {
  double max_logit = -std::numeric_limits<double>::infinity();
  for (int64_t i = 0; i < vocab_size; ++i) max_logit = std::max(max_logit, static_cast<double>(logits[i]));
  DI_CHECK(std::isfinite(max_logit), "logits have no finite maximum (" << max_logit << ")");
  double sum = 0.0;
  for (int64_t i = 0; i < vocab_size; ++i) sum += std::exp(static_cast<double>(logits[i]) - max_logit);
  return max_logit + std::log(sum);
}

// The k highest logits' ids, logit descending, ids ascending among ties. For the API's k <= 20,
// one pass keeping a sorted list of k, since sorting 1e5 ids per token would dominate.
std::vector<int32_t> top_ids(const float* logits, int64_t vocab_size, int32_t k) {
  constexpr size_t kMaxInsertionCount = 64;
  const auto count = static_cast<size_t>(std::clamp<int64_t>(k, 0, vocab_size));
  std::vector<int32_t> best;
  if (count == 0) return best;
  if (count > kMaxInsertionCount) {
    best.resize(static_cast<size_t>(vocab_size));
    std::iota(best.begin(), best.end(), 0);
    std::partial_sort(best.begin(), best.begin() + static_cast<std::ptrdiff_t>(count), best.end(),
                      [&](int32_t a, int32_t b) { return logits[a] != logits[b] ? logits[a] > logits[b] : a < b; });
    best.resize(count);
    return best;
  }
  best.reserve(count + 1);
  for (int64_t i = 0; i < vocab_size; ++i) {
    const float logit = logits[i];
    // Ids arrive ascending, so an equal logit never displaces an earlier id.
    if (best.size() == count && !(logit > logits[best.back()])) continue;
    auto at = std::upper_bound(best.begin(), best.end(), logit,
                               [&](float value, int32_t id) { return value > logits[id]; });
    best.insert(at, static_cast<int32_t>(i));
    if (best.size() > count) best.pop_back();
  }
  return best;
}

}  // namespace

TokenLogprob token_logprob(const float* logits, int64_t vocab_size, int32_t chosen, int32_t top_k) {
  DI_CHECK(chosen >= 0 && chosen < vocab_size, "token " << chosen << " outside vocabulary " << vocab_size);
  DI_CHECK(top_k >= 0, "top_k " << top_k);
  const double log_sum = log_sum_exp(logits, vocab_size);
  TokenLogprob out;
  out.token_id = chosen;
  out.logprob = static_cast<double>(logits[chosen]) - log_sum;
  for (int32_t id : top_ids(logits, vocab_size, top_k)) {
    out.top.emplace_back(id, static_cast<double>(logits[id]) - log_sum);
  }
  return out;
}

std::vector<double> log_softmax(const float* logits, int64_t vocab_size) {
  const double log_sum = log_sum_exp(logits, vocab_size);
  std::vector<double> out(static_cast<size_t>(vocab_size));
  for (int64_t i = 0; i < vocab_size; ++i) out[static_cast<size_t>(i)] = static_cast<double>(logits[i]) - log_sum;
  return out;
}

std::vector<std::pair<int32_t, double>> top_logprobs(const float* logits, int64_t vocab_size, int32_t k) {
  const double log_sum = log_sum_exp(logits, vocab_size);
  std::vector<std::pair<int32_t, double>> top;
  for (int32_t id : top_ids(logits, vocab_size, k)) top.emplace_back(id, static_cast<double>(logits[id]) - log_sum);
  return top;
}

double kl_divergence(const float* reference_logits, const float* logits, int64_t vocab_size) {
  const double reference_log_sum = log_sum_exp(reference_logits, vocab_size);
  const double log_sum = log_sum_exp(logits, vocab_size);
  double kl = 0.0;
  for (int64_t i = 0; i < vocab_size; ++i) {
    const double reference_logprob = static_cast<double>(reference_logits[i]) - reference_log_sum;
    const double p = std::exp(reference_logprob);
    // A token the reference gives no mass adds nothing, whatever the other side says.
    if (p > 0.0) kl += p * (reference_logprob - (static_cast<double>(logits[i]) - log_sum));
  }
  return kl;
}

double entropy(const float* logits, int64_t vocab_size) {
  const double log_sum = log_sum_exp(logits, vocab_size);
  double sum = 0.0;
  for (int64_t i = 0; i < vocab_size; ++i) {
    const double logprob = static_cast<double>(logits[i]) - log_sum;
    const double p = std::exp(logprob);
    if (p > 0.0) sum -= p * logprob;
  }
  return sum;
}

}  // namespace deepinfer
