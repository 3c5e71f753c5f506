// Skewed routers for deepinfer-make-random-model --router-skew (issue 20's skewed-router runs):
// random routers spread tokens evenly over the experts, which is the best case for a grouped
// GEMM's load balance and hides what a real model's popular experts cost.
#pragma once

#include <cstdint>
#include <vector>

#include "core/result.h"
#include "weights/hf_config.h"
#include "weights/safetensors.h"

namespace deepinfer::bench {

struct RouterSkew {
  double min_scale = 0.0;  // the layers' biases' standard deviations, least and most
  double max_scale = 0.0;
  int64_t num_layers = 0;
};

// Writes every MoE layer's router bias in views: GPT-OSS's router.bias (added to the logits),
// otherwise the selection bias of topk_method noaux_tc (e_score_correction_bias; a config without
// it is refused with what to add). Expert e gets scale x z_e, z drawn standard normal per layer
// (seeded). Each layer's scale is found by bisection so that, routed as the engine routes
// (kernels::cpu::moe_route) over 2048 isotropic hidden states of rms 1 (what a norm emits) through
// the first MoE layer's router, the tenth of the experts with the largest z takes `share` of the
// routed tokens.
Result<RouterSkew> skew_routers(const ModelConfig& config, std::vector<TensorView>& views, double share, uint64_t seed);

}  // namespace deepinfer::bench
