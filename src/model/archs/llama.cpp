// Llama 1/2/3.x: the plain pre-norm decoder; attention_bias puts biases on q/k/v/o, mlp_bias on
// the MLP (both off in published Llama checkpoints). Llama 3.x rope scaling comes from config.
#include "model/archs/archs.h"
#include "model/layers/dense_decoder.h"

namespace deepinfer::archs {

Result<std::unique_ptr<CausalLM>> build_llama(const ModelSource& source) {
  DenseDecoderOptions options;
  options.qkv_bias = source.config.attention_bias;
  options.o_bias = source.config.attention_bias;
  options.mlp_bias = source.config.raw.value("mlp_bias", false);
  return DenseDecoder::load(source, options);
}

}  // namespace deepinfer::archs
