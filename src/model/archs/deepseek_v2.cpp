// DeepSeek-V2 (and V2-Lite): multi-head latent attention on every layer (plain q_proj when
// q_lora_rank is null), softmax routing (greedy or group-limited greedy), shared experts, dense
// MLPs on the first first_k_dense_replace layers. Rope pairs are interleaved as in the checkpoints.
#include "model/archs/archs.h"
#include "model/layers/dense_decoder.h"

namespace deepinfer::archs {

Result<std::unique_ptr<CausalLM>> build_deepseek_v2(const ModelSource& source) {
  const ModelConfig& config = source.config;
  if (!config.moe) return Error{"config.json: " + config.architecture + " needs n_routed_experts"};
  auto mla = mla_options_from_config(config);
  if (!mla.ok()) return mla.error();
  DenseDecoderOptions options;
  options.mla = *mla;
  options.moe = moe_options_from_config(*config.moe);
  const MoeConfig moe_config = *config.moe;
  options.is_moe_layer = [moe_config](int64_t layer) { return moe_config.is_moe_layer(layer); };
  return DenseDecoder::load(source, options);
}

}  // namespace deepinfer::archs
