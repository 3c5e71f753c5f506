// DeepSeek-V3 / R1: the DeepSeek-V2 graph with sigmoid scoring, e_score_correction_bias for expert
// choice and noaux_tc grouped top-k (groups ranked by their two best experts), normalised top-k
// weights times routed_scaling_factor; yarn rope with the softmax-scale correction. MTP layers
// after the decoder layers are loaded and kept (DenseDecoder::mtp_layers).
#include "model/archs/archs.h"
#include "model/layers/dense_decoder.h"

namespace deepinfer::archs {

Result<std::unique_ptr<CausalLM>> build_deepseek_v3(const ModelSource& source) {
  // Scoring, top-k method and their defaults come from config.json (hf_config_moe.cpp), so V3
  // differs from V2 only in what its config says.
  return build_deepseek_v2(source);
}

}  // namespace deepinfer::archs
