// Qwen2 / Qwen2.5: the Llama graph with biases on q/k/v (never on o_proj); optional sliding
// window on layers from max_window_layers on (parsed into layer_sliding_window).
#include "model/archs/archs.h"
#include "model/layers/dense_decoder.h"

namespace deepinfer::archs {

Result<std::unique_ptr<CausalLM>> build_qwen2(const ModelSource& source) {
  DenseDecoderOptions options;
  options.qkv_bias = true;
  return DenseDecoder::load(source, options);
}

}  // namespace deepinfer::archs
