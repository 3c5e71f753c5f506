// The Llama-family decoder stack.
#include "model/layers/dense_decoder.h"

#include <algorithm>

#include "core/check.h"

namespace deepinfer {

Result<std::unique_ptr<CausalLM>> DenseDecoder::load(const ModelSource& source, const DenseDecoderOptions& options) {
  const ModelConfig& config = source.config;
  const std::string activation = config.raw.value("hidden_act", std::string("silu"));
  if (activation != "silu" && activation != "swish") {
    return Error{"config.json: hidden_act '" + activation + "' is not supported by " + config.architecture +
                 " (expected silu)"};
  }
  std::unique_ptr<DenseDecoder> model(new DenseDecoder(source));
  auto rope = make_rope_table(config.rope, config.head_dim, config.max_position_embeddings);
  if (!rope.ok()) return Error{"config.json: " + rope.error().message};

  auto embed = load_tensor(source, "model.embed_tokens.weight", {config.vocab_size, config.hidden_size});
  if (!embed.ok()) return embed.error();
  model->embed_tokens_ = *embed;
  if (config.tie_word_embeddings) {
    model->lm_head_ = *embed;
  } else {
    auto lm_head = load_tensor(source, "lm_head.weight", {config.vocab_size, config.hidden_size});
    if (!lm_head.ok()) return lm_head.error();
    model->lm_head_ = *lm_head;
  }
  auto final_norm = RmsNorm::load(source, "model.norm.weight", config.hidden_size, config.rms_norm_eps);
  if (!final_norm.ok()) return final_norm.error();
  model->final_norm_ = *final_norm;

  for (int64_t i = 0; i < config.num_hidden_layers; ++i) {
    const std::string prefix = "model.layers." + std::to_string(i);
    AttentionOptions attention_options;
    attention_options.qkv_bias = options.qkv_bias;
    attention_options.o_bias = options.o_bias;
    attention_options.qk_norm = options.qk_norm;
    if (static_cast<size_t>(i) < config.layer_sliding_window.size()) {
      attention_options.sliding_window = config.layer_sliding_window[static_cast<size_t>(i)];
    }
    auto input_norm = RmsNorm::load(source, prefix + ".input_layernorm.weight", config.hidden_size,
                                    config.rms_norm_eps);
    if (!input_norm.ok()) return input_norm.error();
    auto attention = AttentionLayer::load(source, prefix + ".self_attn", attention_options, *rope);
    if (!attention.ok()) return attention.error();
    auto post_norm = RmsNorm::load(source, prefix + ".post_attention_layernorm.weight", config.hidden_size,
                                   config.rms_norm_eps);
    if (!post_norm.ok()) return post_norm.error();
    auto mlp = GatedMlp::load(source, prefix + ".mlp", config.hidden_size, config.intermediate_size,
                              options.mlp_bias);
    if (!mlp.ok()) return mlp.error();
    model->layers_.push_back(Layer{*input_norm, std::move(*attention), *post_norm, *mlp});
  }
  return std::unique_ptr<CausalLM>(std::move(model));
}

int64_t DenseDecoder::kv_bytes_per_token() const {
  int64_t bytes = 0;
  for (const Layer& layer : layers_) bytes += 2 * layer.attention.kv_dim() * static_cast<int64_t>(sizeof(float));
  return bytes;
}

void DenseDecoder::allocate_kv_cache(const KvCacheShape& shape) {
  kv_shape_ = shape;
  for (Layer& layer : layers_) layer.attention.allocate_kv_cache(backend_, shape);
}

void DenseDecoder::copy_kv_blocks(const std::vector<std::pair<int32_t, int32_t>>& src_dst) {
  for (const Layer& layer : layers_) {
    for (const auto& [src, dst] : src_dst) layer.attention.copy_kv_block(backend_, src, dst);
  }
}

int64_t DenseDecoder::kv_floats_per_block() const {
  int64_t floats = 0;
  for (const Layer& layer : layers_) floats += layer.attention.kv_floats_per_block();
  return floats;
}

void DenseDecoder::read_kv_blocks(const std::vector<int32_t>& block_ids, float* host) const {
  for (int32_t block : block_ids) {
    for (const Layer& layer : layers_) {
      layer.attention.read_kv_block(backend_, block, host);
      host += layer.attention.kv_floats_per_block();
    }
  }
}

void DenseDecoder::write_kv_blocks(const std::vector<int32_t>& block_ids, const float* host) {
  for (int32_t block : block_ids) {
    for (const Layer& layer : layers_) {
      layer.attention.write_kv_block(backend_, block, host);
      host += layer.attention.kv_floats_per_block();
    }
  }
}

int64_t DenseDecoder::weight_bytes_per_token() const {
  const auto element = [](const kernels::WeightView& w) { return static_cast<int64_t>(dtype_size_bytes(w.dtype)); };
  int64_t bytes = embed_tokens_.cols * element(embed_tokens_) + lm_head_.rows * lm_head_.cols * element(lm_head_);
  for (const Layer& layer : layers_) {
    bytes += layer.attention.weight_bytes() + layer.mlp.weight_bytes();
    bytes += 2 * config_.hidden_size * element(layer.input_norm.weight);
  }
  return bytes;
}

void DenseDecoder::ensure_workspace(int64_t num_tokens, int64_t num_logit_rows) {
  if (num_tokens > workspace_tokens_) {
    const int64_t hidden = config_.hidden_size;
    int64_t scratch_per_token = 2 * config_.intermediate_size;
    if (!layers_.empty()) {
      const AttentionLayer& attention = layers_.front().attention;
      scratch_per_token = std::max(scratch_per_token, 2 * attention.q_dim() + 2 * attention.kv_dim());
    }
    const auto floats = [](int64_t count) { return static_cast<size_t>(count) * sizeof(float); };
    hidden_ = backend_.allocate(floats(num_tokens * hidden));
    normed_ = backend_.allocate(floats(num_tokens * hidden));
    delta_ = backend_.allocate(floats(num_tokens * hidden));
    scratch_ = backend_.allocate(floats(num_tokens * scratch_per_token));
    workspace_tokens_ = num_tokens;
  }
  if (num_logit_rows > workspace_logit_rows_) {
    logit_hidden_ = backend_.allocate(static_cast<size_t>(num_logit_rows * config_.hidden_size) * sizeof(float));
    logits_ = backend_.allocate(static_cast<size_t>(num_logit_rows * config_.vocab_size) * sizeof(float));
    workspace_logit_rows_ = num_logit_rows;
  }
}

void DenseDecoder::forward(const ForwardBatch& batch, float* logits) {
  const int64_t num_tokens = batch.num_tokens();
  const auto num_logit_rows = static_cast<int64_t>(batch.logit_rows.size());
  DI_CHECK(num_tokens > 0, "forward needs at least one token");
  for (int32_t row : batch.logit_rows) DI_CHECK(row >= 0 && row < num_tokens, "logit row " << row << " out of range");
  ensure_workspace(num_tokens, std::max<int64_t>(num_logit_rows, 1));
  const DeviceBatch device_batch = DeviceBatch::upload(backend_, batch, kv_shape_.block_size);
  const int64_t hidden = config_.hidden_size;
  auto* residual = hidden_.as<float>();
  auto* normed = normed_.as<float>();
  auto* delta = delta_.as<float>();
  auto* scratch = scratch_.as<float>();

  backend_.embedding(embed_tokens_, device_batch.token_ids.as<int32_t>(), num_tokens, residual);
  for (size_t i = 0; i < layers_.size(); ++i) {
    const Layer& layer = layers_[i];
    if (i == 0) {
      layer.input_norm.forward(backend_, residual, num_tokens, normed);
    } else {
      layer.input_norm.add_forward(backend_, residual, delta, num_tokens, normed);
    }
    layer.attention.forward(backend_, device_batch, normed, scratch, delta);
    layer.post_attention_norm.add_forward(backend_, residual, delta, num_tokens, normed);
    layer.mlp.forward(backend_, normed, num_tokens, scratch, delta);
  }
  final_norm_.add_forward(backend_, residual, delta, num_tokens, normed);
  if (num_logit_rows == 0) return;

  auto* logit_hidden = logit_hidden_.as<float>();
  for (int64_t r = 0; r < num_logit_rows; ++r) {
    backend_.copy_on_device(logit_hidden + r * hidden, normed + batch.logit_rows[static_cast<size_t>(r)] * hidden,
                            static_cast<size_t>(hidden) * sizeof(float));
  }
  backend_.matmul(logit_hidden, lm_head_, kernels::WeightView{}, num_logit_rows, logits_.as<float>());
  backend_.copy_to_host(logits, logits_.as<float>(),
                        static_cast<size_t>(num_logit_rows * config_.vocab_size) * sizeof(float));
}

}  // namespace deepinfer
