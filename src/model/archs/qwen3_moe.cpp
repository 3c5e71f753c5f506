// Qwen3-MoE: the Qwen3 attention (per-head q/k RMSNorm) with softmax top-k routing, renormalised
// when norm_topk_prob; dense MLPs on mlp_only_layers and off the decoder_sparse_step grid.
#include "model/archs/archs.h"
#include "model/layers/dense_decoder.h"

namespace deepinfer::archs {

Result<std::unique_ptr<CausalLM>> build_qwen3_moe(const ModelSource& source) {
  const ModelConfig& config = source.config;
  if (!config.moe) return Error{"config.json: " + config.architecture + " needs num_experts"};
  DenseDecoderOptions options;
  options.qkv_bias = config.attention_bias;
  options.o_bias = config.attention_bias;
  options.qk_norm = true;
  options.moe = moe_options_from_config(*config.moe);
  const MoeConfig moe_config = *config.moe;
  options.is_moe_layer = [moe_config](int64_t layer) { return moe_config.is_moe_layer(layer); };
  return DenseDecoder::load(source, options);
}

}  // namespace deepinfer::archs
