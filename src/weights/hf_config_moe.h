// Internal to weights/: the mixture-of-experts, latent-attention, MTP and FP8 fields of config.json.
#pragma once

#include "weights/hf_config.h"
#include "weights/json_fields.h"

namespace deepinfer {

// Fills config.moe, config.mla, config.fp8 and config.num_nextn_predict_layers.
Result<void> parse_moe_fields(const JsonFields& fields, ModelConfig& config);

}  // namespace deepinfer
