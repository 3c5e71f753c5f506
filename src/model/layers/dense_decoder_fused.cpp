// DenseDecoder's decode fusion: each layer reads the residual stream itself and the backend folds
// the layer's norms and residual adds into its products (Backend::fuses_norm_products), so a decode
// step runs two kernels fewer per layer. The numbers are those of the unfused forward.
#include "model/layers/dense_decoder.h"

namespace deepinfer {

std::optional<DType> DenseDecoder::residual_stream_dtype() const {
  std::optional<DType> dtype;
  for (const Layer& layer : layers_) {
    const auto* attention = std::get_if<AttentionLayer>(&layer.attention);
    const auto* mlp = std::get_if<GatedMlp>(&layer.ffn);
    // Sandwich norms normalise the sub-layer's output before the add: not a plain residual add.
    if (attention == nullptr || mlp == nullptr || layer.pre_feedforward_norm || !attention->takes_residual_stream() ||
        !mlp->takes_residual_stream()) {
      return std::nullopt;
    }
    if (dtype && *dtype != attention->weight_dtype()) return std::nullopt;
    dtype = attention->weight_dtype();
  }
  return dtype;
}

bool DenseDecoder::runs_residual_stream(int64_t num_tokens) const {
  return residual_stream_dtype_ && backend_.fuses_norm_products(num_tokens, *residual_stream_dtype_);
}

void DenseDecoder::enqueue_residual_layer(const Layer& layer, const DeviceBatch& batch) {
  auto* scratch = scratch_.as<float>();
  ResidualStream stream{hidden_.as<float>(), layer.input_norm.weights(), normed_.as<float>(), delta_.as<float>()};
  std::get<AttentionLayer>(layer.attention).forward_residual(backend_, batch, stream, scratch);
  stream.norm = layer.post_attention_norm.weights();
  std::get<GatedMlp>(layer.ffn).forward_residual(backend_, stream, batch.num_tokens, scratch);
}

}  // namespace deepinfer
