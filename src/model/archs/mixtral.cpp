// Mixtral: the Mistral graph with a mixture of experts on every layer: softmax over all experts,
// top-k, renormalised. Published checkpoints name the block block_sparse_moe with experts
// w1 (gate), w3 (up), w2 (down); transformers 5 saves it as mlp with fused experts.
#include "model/archs/archs.h"
#include "model/layers/dense_decoder.h"

namespace deepinfer::archs {

Result<std::unique_ptr<CausalLM>> build_mixtral(const ModelSource& source) {
  const ModelConfig& config = source.config;
  if (!config.moe) return Error{"config.json: " + config.architecture + " needs num_local_experts"};
  DenseDecoderOptions options;
  options.moe = moe_options_from_config(*config.moe);
  options.moe->routing.normalize = true;
  if (source.weights->find("model.layers.0.block_sparse_moe.gate.weight")) options.ffn_name = "block_sparse_moe";
  options.moe->gate_name = "w1";
  options.moe->up_name = "w3";
  options.moe->down_name = "w2";
  return DenseDecoder::load(source, options);
}

}  // namespace deepinfer::archs
