// Mistral: the Llama graph without biases; sliding-window attention on every layer when
// config.sliding_window is set (parsed into layer_sliding_window).
#include "model/archs/archs.h"
#include "model/layers/dense_decoder.h"

namespace deepinfer::archs {

Result<std::unique_ptr<CausalLM>> build_mistral(const ModelSource& source) {
  return DenseDecoder::load(source, DenseDecoderOptions{});
}

}  // namespace deepinfer::archs
