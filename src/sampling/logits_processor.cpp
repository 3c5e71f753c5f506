// History-dependent logits processors: min_tokens, logit bias, repetition / frequency / presence,
// and the penalties' incremental history.
#include "sampling/logits_processor.h"

#include <algorithm>
#include <limits>

#include "core/check.h"

namespace deepinfer {
namespace {

void check_token(int32_t token_id, int64_t vocab) {
  DI_CHECK(token_id >= 0 && token_id < vocab, "token " << token_id << " outside vocabulary " << vocab);
}

void apply_min_tokens(float* logits, int64_t vocab, const SamplingParams& params, size_t num_output_tokens,
                      const std::vector<int32_t>& eos_ids) {
  if (num_output_tokens >= static_cast<size_t>(std::max(params.min_tokens, 0))) return;
  constexpr float kMasked = -std::numeric_limits<float>::infinity();
  for (int32_t id : eos_ids) {
    check_token(id, vocab);
    logits[id] = kMasked;
  }
  for (int32_t id : params.stop_token_ids) {
    check_token(id, vocab);
    logits[id] = kMasked;
  }
}

// One token's share of the penalties; each penalised id gets exactly one call of each.
void penalise_repeated(float& logit, float penalty) { logit = logit > 0.0f ? logit / penalty : logit * penalty; }

void penalise_output(float& logit, float frequency_penalty, float presence_penalty, int64_t count) {
  logit -= frequency_penalty * static_cast<float>(count);
  logit -= presence_penalty;
}

void apply_repetition_penalty(float* logits, int64_t vocab, float penalty, std::span<const int32_t> prompt_tokens,
                              std::span<const int32_t> output_tokens) {
  // A token seen twice is still penalised once.
  std::vector<bool> seen(static_cast<size_t>(vocab), false);
  for (std::span<const int32_t> tokens : {prompt_tokens, output_tokens}) {
    for (int32_t id : tokens) {
      check_token(id, vocab);
      if (seen[static_cast<size_t>(id)]) continue;
      seen[static_cast<size_t>(id)] = true;
      penalise_repeated(logits[id], penalty);
    }
  }
}

void apply_output_penalties(float* logits, int64_t vocab, float frequency_penalty, float presence_penalty,
                            std::span<const int32_t> output_tokens) {
  std::vector<int32_t> sorted(output_tokens.begin(), output_tokens.end());
  std::sort(sorted.begin(), sorted.end());
  for (size_t begin = 0; begin < sorted.size();) {
    const int32_t id = sorted[begin];
    check_token(id, vocab);
    size_t end = begin;
    while (end < sorted.size() && sorted[end] == id) ++end;
    penalise_output(logits[id], frequency_penalty, presence_penalty, static_cast<int64_t>(end - begin));
    begin = end;
  }
}

// The processors that read no history: min_tokens and logit_bias.
void apply_min_tokens_and_bias(float* logits, int64_t vocab, const SamplingParams& params, size_t num_output_tokens,
                               const std::vector<int32_t>& eos_ids) {
  DI_CHECK(vocab > 0, "vocab " << vocab);
  apply_min_tokens(logits, vocab, params, num_output_tokens, eos_ids);
  for (const auto& [id, bias] : params.logit_bias) {
    check_token(id, vocab);
    logits[id] += bias;
  }
}

}  // namespace

void apply_logits_processors(float* logits, int64_t vocab, const SamplingParams& params,
                             std::span<const int32_t> prompt_tokens, std::span<const int32_t> output_tokens,
                             const std::vector<int32_t>& eos_ids) {
  apply_min_tokens_and_bias(logits, vocab, params, output_tokens.size(), eos_ids);
  if (params.repetition_penalty != 1.0) {
    apply_repetition_penalty(logits, vocab, static_cast<float>(params.repetition_penalty), prompt_tokens,
                             output_tokens);
  }
  if (params.frequency_penalty != 0.0 || params.presence_penalty != 0.0) {
    apply_output_penalties(logits, vocab, static_cast<float>(params.frequency_penalty),
                           static_cast<float>(params.presence_penalty), output_tokens);
  }
}

PenaltyHistory::PenaltyHistory(int64_t vocab, std::span<const int32_t> prompt_tokens)
    : vocab_(vocab), seen_(static_cast<size_t>(vocab), false) {
  for (int32_t id : prompt_tokens) mark_seen(id);
}

void PenaltyHistory::mark_seen(int32_t token_id) {
  check_token(token_id, vocab_);
  if (seen_[static_cast<size_t>(token_id)]) return;
  seen_[static_cast<size_t>(token_id)] = true;
  seen_ids_.push_back(token_id);
}

void PenaltyHistory::append_output(int32_t token_id) {
  mark_seen(token_id);
  ++output_counts_[token_id];
}

void PenaltyHistory::apply(float* logits, const SamplingParams& params) const {
  if (params.repetition_penalty != 1.0) {
    const auto penalty = static_cast<float>(params.repetition_penalty);
    for (int32_t id : seen_ids_) penalise_repeated(logits[id], penalty);
  }
  if (params.frequency_penalty != 0.0 || params.presence_penalty != 0.0) {
    const auto frequency_penalty = static_cast<float>(params.frequency_penalty);
    const auto presence_penalty = static_cast<float>(params.presence_penalty);
    for (const auto& [id, count] : output_counts_) {
      penalise_output(logits[id], frequency_penalty, presence_penalty, count);
    }
  }
}

void apply_logits_processors(float* logits, int64_t vocab, const SamplingParams& params, size_t num_output_tokens,
                             const PenaltyHistory* penalties, const std::vector<int32_t>& eos_ids) {
  apply_min_tokens_and_bias(logits, vocab, params, num_output_tokens, eos_ids);
  if (!uses_penalties(params)) return;
  DI_CHECK(penalties != nullptr, "a request with penalties has no PenaltyHistory");
  penalties->apply(logits, params);
}

bool uses_penalties(const SamplingParams& params) {
  return params.repetition_penalty != 1.0 || params.frequency_penalty != 0.0 || params.presence_penalty != 0.0;
}

bool logits_processors_active(const SamplingParams& params, size_t num_output_tokens) {
  return num_output_tokens < static_cast<size_t>(std::max(params.min_tokens, 0)) || !params.logit_bias.empty() ||
         uses_penalties(params);
}

}  // namespace deepinfer
