// Gemma 3 (text, Gemma3ForCausalLM): sliding-window and global layers (layer_types or
// sliding_window_pattern) with their own rope (rope_local_base_freq, or rope_parameters per layer
// type; linear scaling on the global layers of 4B+), softmax scale query_pre_attn_scalar^-0.5,
// RMSNorms that store w - 1 (q/k norms too), a norm on each sub-layer's output before the
// residual add (post_attention / post_feedforward) and before the MLP (pre_feedforward), GeGLU,
// embeddings scaled by sqrt(hidden) rounded to the embedding dtype, final-logit soft-capping
// when configured, tied embeddings.
#include "model/archs/archs.h"
#include "model/layers/dense_decoder.h"

namespace deepinfer::archs {

Result<std::unique_ptr<CausalLM>> build_gemma3(const ModelSource& source) {
  const ModelConfig& config = source.config;
  const auto bidirectional = config.raw.find("use_bidirectional_attention");
  if (bidirectional != config.raw.end() && bidirectional->is_boolean() && bidirectional->get<bool>()) {
    return Error{"config.json: use_bidirectional_attention is true (an embedding model); " + config.architecture +
                 " is served as a causal language model only"};
  }
  DenseDecoderOptions options;
  options.qkv_bias = config.attention_bias;
  options.o_bias = config.attention_bias;
  options.qk_norm = true;
  options.norm_weight_offset = 1.0f;
  options.sandwich_norms = true;
  options.scale_embeddings = true;
  return DenseDecoder::load(source, options);
}

}  // namespace deepinfer::archs
