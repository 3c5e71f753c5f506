// The closed forms of CostModel and their JSON overrides.
#include "cluster/cost_model.h"

#include <cmath>
#include <fstream>
#include <utility>
#include <vector>

namespace deepinfer {
namespace {

// Every field a cost-model file may set, with its member.
const std::vector<std::pair<const char*, double CostModel::*>>& fields() {
  static const std::vector<std::pair<const char*, double CostModel::*>> kFields = {
      {"prefill_step_overhead_ms", &CostModel::prefill_step_overhead_ms},
      {"prefill_per_token_ms", &CostModel::prefill_per_token_ms},
      {"prefill_attention_per_token_pair_ms", &CostModel::prefill_attention_per_token_pair_ms},
      {"decode_step_overhead_ms", &CostModel::decode_step_overhead_ms},
      {"decode_per_request_ms", &CostModel::decode_per_request_ms},
      {"decode_per_context_token_ms", &CostModel::decode_per_context_token_ms},
      {"store_load_per_token_ms", &CostModel::store_load_per_token_ms},
  };
  return kFields;
}

}  // namespace

double CostModel::prefill_tokens_ms(int64_t new_tokens, int64_t prior_tokens) const {
  const auto n = static_cast<double>(new_tokens);
  return prefill_per_token_ms * n +
         prefill_attention_per_token_pair_ms * n * (static_cast<double>(prior_tokens) + n / 2);
}

double CostModel::prefill_ms(int64_t new_tokens, int64_t prior_tokens) const {
  return prefill_step_overhead_ms + prefill_tokens_ms(new_tokens, prior_tokens);
}

double CostModel::decode_step_ms(int64_t batch, int64_t context_tokens) const {
  return decode_step_overhead_ms + decode_per_request_ms * static_cast<double>(batch) +
         decode_per_context_token_ms * static_cast<double>(context_tokens);
}

int64_t CostModel::max_tokens_within(double budget_ms, int64_t prior_tokens) const {
  if (budget_ms <= 0) return 0;
  // Solve (b / 2) n^2 + (a + b p) n = budget for n; with b = 0 the compute is linear.
  const double b = prefill_attention_per_token_pair_ms;
  const double linear = prefill_per_token_ms + b * static_cast<double>(prior_tokens);
  double n = 0;
  if (b > 0) {
    n = (std::sqrt(linear * linear + 2 * b * budget_ms) - linear) / b;
  } else if (linear > 0) {
    n = budget_ms / linear;
  } else {
    return INT64_MAX;
  }
  auto tokens = static_cast<int64_t>(std::floor(n));
  // Rounding in the square root may leave the last token just over the budget.
  while (tokens > 0 && prefill_tokens_ms(tokens, prior_tokens) > budget_ms) --tokens;
  return tokens;
}

nlohmann::json CostModel::to_json() const {
  nlohmann::json out = nlohmann::json::object();
  for (const auto& [name, member] : fields()) out[name] = this->*member;
  return out;
}

Result<CostModel> CostModel::from_json(const nlohmann::json& overrides) {
  if (!overrides.is_object()) return Error{"a cost model must be a JSON object of numeric fields"};
  CostModel model;
  for (const auto& [key, value] : overrides.items()) {
    bool known = false;
    for (const auto& [name, member] : fields()) {
      if (key != name) continue;
      known = true;
      if (!value.is_number() || value.get<double>() < 0) {
        return Error{"cost model field '" + key + "' must be a non-negative number, got " + value.dump()};
      }
      model.*member = value.get<double>();
    }
    if (!known) {
      std::string names;
      for (const auto& field : fields()) names += std::string(names.empty() ? "" : ", ") + field.first;
      return Error{"unknown cost model field '" + key + "' (known: " + names + ")"};
    }
  }
  return model;
}

Result<CostModel> CostModel::from_json_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) return Error{"cannot open the cost model file " + path};
  const nlohmann::json parsed = nlohmann::json::parse(in, nullptr, false);
  if (parsed.is_discarded()) return Error{path + ": not valid JSON"};
  Result<CostModel> model = from_json(parsed);
  if (!model.ok()) return Error{path + ": " + model.error().message};
  return model;
}

}  // namespace deepinfer
