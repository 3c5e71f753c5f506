// SamplingParams::validate: every field against the range its header comment documents.
#include "deepinfer/sampling_params.h"

#include <cmath>
#include <sstream>
#include <string>

#include "core/check.h"

namespace deepinfer {
namespace {

// "<field> must be <range>, got <value>": the field first, so a CLI can prefix its flag syntax.
template <typename T>
Error range_error(const std::string& field, const std::string& range, const T& value) {
  std::ostringstream message;
  message << field << " must be " << range << ", got " << value;
  return Error{message.str()};
}

bool in_closed(double value, double low, double high) { return std::isfinite(value) && value >= low && value <= high; }

Result<void> check_logprobs_count(const char* field, const std::optional<int32_t>& count) {
  constexpr int32_t kMaxLogprobs = 20;
  if (count && (*count < 0 || *count > kMaxLogprobs)) {
    return range_error(field, "in [0, " + std::to_string(kMaxLogprobs) + "] (or unset)", *count);
  }
  return {};
}

Result<void> check_token_id(const std::string& field, int32_t token_id, int64_t vocab_size) {
  if (token_id < 0 || token_id >= vocab_size) {
    return range_error(field, "a token id in [0, " + std::to_string(vocab_size) + ")", token_id);
  }
  return {};
}

}  // namespace

Result<void> SamplingParams::validate(int64_t vocab_size) const {
  DI_CHECK(vocab_size > 0, "vocab_size " << vocab_size);
  if (n < 1) return range_error("n", ">= 1", n);
  if (!std::isfinite(temperature) || temperature < 0.0) {
    return range_error("temperature", "a finite number >= 0 (0 is greedy)", temperature);
  }
  if (!(top_p > 0.0 && top_p <= 1.0)) return range_error("top_p", "in (0, 1]", top_p);
  if (top_k < -1) return range_error("top_k", ">= 1, or 0 / -1 to keep all tokens", top_k);
  if (!in_closed(min_p, 0.0, 1.0)) return range_error("min_p", "in [0, 1]", min_p);
  if (!in_closed(presence_penalty, -2.0, 2.0)) return range_error("presence_penalty", "in [-2, 2]", presence_penalty);
  if (!in_closed(frequency_penalty, -2.0, 2.0)) {
    return range_error("frequency_penalty", "in [-2, 2]", frequency_penalty);
  }
  if (!std::isfinite(repetition_penalty) || repetition_penalty <= 0.0) {
    return range_error("repetition_penalty", "a finite number > 0 (1 is off)", repetition_penalty);
  }
  for (const auto& [token_id, bias] : logit_bias) {
    DI_TRY(check_token_id("logit_bias key", token_id, vocab_size));
    if (!in_closed(bias, -100.0, 100.0)) {
      return range_error("logit_bias[" + std::to_string(token_id) + "]", "in [-100, 100]", bias);
    }
  }
  for (size_t i = 0; i < stop.size(); ++i) {
    if (stop[i].empty()) return Error{"stop[" + std::to_string(i) + "] is empty; stop strings must be non-empty"};
  }
  for (size_t i = 0; i < stop_token_ids.size(); ++i) {
    DI_TRY(check_token_id("stop_token_ids[" + std::to_string(i) + "]", stop_token_ids[i], vocab_size));
  }
  if (max_tokens < 0) return range_error("max_tokens", ">= 0", max_tokens);
  if (min_tokens < 0 || min_tokens > max_tokens) {
    return range_error("min_tokens", "in [0, max_tokens] = [0, " + std::to_string(max_tokens) + "]", min_tokens);
  }
  DI_TRY(check_logprobs_count("logprobs", logprobs));
  DI_TRY(check_logprobs_count("prompt_logprobs", prompt_logprobs));
  return {};
}

}  // namespace deepinfer
