// Router biases drawn for a chosen load skew, calibrated on the engine's own routing.
#include "router_skew.h"

#include <algorithm>
#include <functional>
#include <limits>
#include <map>
#include <random>
#include <string>

#include "core/dtype.h"
#include "kernels/ops.h"
#include "model/layers/moe.h"
#include "model/model.h"

namespace deepinfer::bench {
namespace {

constexpr int64_t kCalibrationTokens = 2048;
constexpr int kBisectionSteps = 30;

// One MoE layer's router weight and the bias skew_routers writes.
struct Router {
  const TensorView* weight;
  TensorView* bias;
};

// A layer's standard normal draw per expert: its bias is scale times it.
std::vector<double> random_draws(int32_t num_experts, uint64_t seed, int64_t layer) {
  std::mt19937_64 rng(seed * 0x9e3779b97f4a7c15ull + static_cast<uint64_t>(layer) + 1);
  std::normal_distribution<double> normal(0.0, 1.0);
  std::vector<double> draws(static_cast<size_t>(num_experts));
  for (double& z : draws) z = normal(rng);
  return draws;
}

std::vector<float> biases(const std::vector<double>& draws, double scale) {
  std::vector<float> bias(draws.size());
  for (size_t e = 0; e < draws.size(); ++e) bias[e] = static_cast<float>(scale * draws[e]);
  return bias;
}

void store_bias(TensorView& view, const std::vector<float>& bias) {
  void* dst = const_cast<void*>(view.data);
  for (size_t e = 0; e < bias.size(); ++e) {
    switch (view.dtype) {
      case DType::kBF16:
        static_cast<uint16_t*>(dst)[e] = f32_to_bf16(bias[e]);
        break;
      case DType::kF16:
        static_cast<uint16_t*>(dst)[e] = f32_to_f16(bias[e]);
        break;
      default:
        static_cast<float*>(dst)[e] = bias[e];
        break;
    }
  }
}

// [tokens, experts] logits of isotropic hidden states of rms 1 through one router.
std::vector<float> calibration_logits(const TensorView& weight, uint64_t seed) {
  const int64_t experts = weight.shape[0];
  const int64_t hidden = weight.shape[1];
  std::vector<float> w(static_cast<size_t>(experts * hidden));
  convert_to_f32(weight.data, weight.dtype, w.size(), w.data());
  std::mt19937_64 rng(seed ^ 0x5eed5eedull);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(hidden));
  std::vector<float> logits(static_cast<size_t>(kCalibrationTokens * experts));
  for (int64_t t = 0; t < kCalibrationTokens; ++t) {
    for (float& v : x) v = normal(rng);
    for (int64_t e = 0; e < experts; ++e) {
      const float* row = w.data() + e * hidden;
      logits[static_cast<size_t>(t * experts + e)] = std::inner_product(x.begin(), x.end(), row, 0.0f);
    }
  }
  return logits;
}

}  // namespace

Result<RouterSkew> skew_routers(const ModelConfig& config, std::vector<TensorView>& views, double share,
                                uint64_t seed) {
  if (!config.moe) return Error{"--router-skew needs a mixture-of-experts config"};
  const MoeConfig& moe = *config.moe;
  const bool gpt_oss = config.model_type == "gpt_oss";
  if (!gpt_oss && moe.topk_method != "noaux_tc") {
    return Error{
        "--router-skew needs a router with a bias: add \"topk_method\": \"noaux_tc\" (with \"n_group\": 1 and "
        "\"topk_group\": 1 where the model has no expert groups) so that the experts' choice takes "
        "e_score_correction_bias, or use a gpt_oss config"};
  }
  const auto num_experts = static_cast<int32_t>(moe.num_experts);
  const int32_t top_k = static_cast<int32_t>(moe.num_experts_per_tok);
  const auto busiest = static_cast<int32_t>(ExpertTokenCounts::busiest_count(0.1, static_cast<size_t>(num_experts)));
  const double even = static_cast<double>(busiest) / num_experts;
  const double most = std::min(1.0, static_cast<double>(busiest) / top_k);
  if (!(share > even && share < most)) {
    return Error{"--router-skew: the busiest tenth (" + std::to_string(busiest) + " of " + std::to_string(num_experts) +
                 " experts, top-" + std::to_string(top_k) + ") can take a share between " + std::to_string(even) +
                 " (even) and " + std::to_string(most) + ", got " + std::to_string(share)};
  }

  std::map<std::string, size_t> index_of;
  for (size_t i = 0; i < views.size(); ++i) index_of[views[i].name] = i;
  const std::string block = gpt_oss                          ? "mlp.router."
                            : config.model_type == "mixtral" ? "block_sparse_moe.gate."
                                                             : "mlp.gate.";
  std::vector<std::pair<int64_t, Router>> routers;
  for (int64_t layer = 0; layer < config.num_hidden_layers; ++layer) {
    if (!moe.is_moe_layer(layer)) continue;
    const std::string prefix = "model.layers." + std::to_string(layer) + "." + block;
    const auto weight = index_of.find(prefix + "weight");
    const auto bias = index_of.find(prefix + (gpt_oss ? "bias" : "e_score_correction_bias"));
    if (weight == index_of.end() || bias == index_of.end()) return Error{"no router tensors at " + prefix};
    routers.push_back({layer, {&views[weight->second], &views[bias->second]}});
  }
  if (routers.empty()) return Error{"--router-skew: the config has no MoE layer"};

  const kernels::MoeRouting routing = moe_options_from_config(moe).routing;
  // The routers' weights are drawn alike, so one sample of logits serves every layer's draws.
  const std::vector<float> logits = calibration_logits(*routers.front().second.weight, seed);
  std::vector<int32_t> expert_ids(static_cast<size_t>(kCalibrationTokens * top_k));
  std::vector<float> expert_weights(expert_ids.size());
  // The share of the experts of the largest draws with biases of this scale, routed as the engine
  // routes.
  const auto share_at = [&](const std::vector<double>& draws, double threshold, double scale) {
    const std::vector<float> bias = biases(draws, scale);
    kernels::WeightView selection_bias;
    std::vector<float> biased;
    if (gpt_oss) {
      biased = logits;
      for (size_t i = 0; i < biased.size(); ++i) biased[i] += bias[i % bias.size()];
    } else {
      selection_bias = {bias.data(), DType::kF32, 1, num_experts};
    }
    kernels::cpu::moe_route(gpt_oss ? biased.data() : logits.data(), selection_bias, kCalibrationTokens, routing,
                            expert_ids.data(), expert_weights.data());
    const auto hits = std::count_if(expert_ids.begin(), expert_ids.end(),
                                    [&](int32_t e) { return draws[static_cast<size_t>(e)] >= threshold; });
    return static_cast<double>(hits) / static_cast<double>(expert_ids.size());
  };

  RouterSkew skew;
  skew.min_scale = std::numeric_limits<double>::infinity();
  for (const auto& [layer, router] : routers) {
    const std::vector<double> draws = random_draws(num_experts, seed, layer);
    std::vector<double> sorted = draws;
    std::nth_element(sorted.begin(), sorted.begin() + (busiest - 1), sorted.end(), std::greater<>());
    const double threshold = sorted[static_cast<size_t>(busiest - 1)];
    double low = 0.0;
    double high = 1e-4;
    while (share_at(draws, threshold, high) < share) {
      low = high;
      high *= 2.0;
      if (high > 1e6) return Error{"--router-skew: no bias scale reaches a share of " + std::to_string(share)};
    }
    for (int step = 0; step < kBisectionSteps; ++step) {
      const double middle = 0.5 * (low + high);
      (share_at(draws, threshold, middle) < share ? low : high) = middle;
    }
    store_bias(*router.bias, biases(draws, high));
    skew.min_scale = std::min(skew.min_scale, high);
    skew.max_scale = std::max(skew.max_scale, high);
    ++skew.num_layers;
  }
  return skew;
}

}  // namespace deepinfer::bench
