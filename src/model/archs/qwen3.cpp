// Qwen3 (dense): the Llama graph with per-head RMSNorm on q and k before rope, an explicit
// head_dim, and attention_bias on q/k/v/o when configured.
#include "model/archs/archs.h"
#include "model/layers/dense_decoder.h"

namespace deepinfer::archs {

Result<std::unique_ptr<CausalLM>> build_qwen3(const ModelSource& source) {
  DenseDecoderOptions options;
  options.qkv_bias = source.config.attention_bias;
  options.o_bias = source.config.attention_bias;
  options.qk_norm = true;
  return DenseDecoder::load(source, options);
}

}  // namespace deepinfer::archs
