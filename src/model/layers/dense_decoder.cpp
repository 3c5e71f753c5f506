// The decoder stack: per-layer attention / feed-forward variants, KV cache plumbing, forward.
#include "model/layers/dense_decoder.h"

#include <algorithm>
#include <cmath>

#include "core/check.h"

namespace deepinfer {
namespace {

template <class... Fs>
struct Overloaded : Fs... {
  using Fs::operator()...;
};

int64_t attention_scratch_floats(const DecoderAttention& attention, int64_t num_tokens) {
  return std::visit(Overloaded{[&](const AttentionLayer& a) { return a.scratch_floats(num_tokens); },
                               [&](const MlaLayer& a) { return a.scratch_floats(num_tokens); }},
                    attention);
}

int64_t ffn_scratch_floats(const DecoderFeedForward& ffn, int64_t num_tokens) {
  return std::visit(Overloaded{[&](const GatedMlp& m) { return 2 * num_tokens * m.intermediate_size(); },
                               [&](const MoeLayer& m) { return m.scratch_floats(num_tokens); }},
                    ffn);
}

int64_t kv_floats_per_block_of(const DecoderAttention& attention) {
  return std::visit([](const auto& a) { return a.kv_floats_per_block(); }, attention);
}

int64_t kv_bytes_per_block_of(const DecoderAttention& attention) {
  return std::visit([](const auto& a) { return a.kv_bytes_per_block(); }, attention);
}

}  // namespace

Result<DecoderLayer> DenseDecoder::load_layer(const ModelSource& source, const DenseDecoderOptions& options,
                                              int64_t index, const RopeTable& rope, const RopeTable* sliding_rope) {
  const ModelConfig& config = source.config;
  const std::string prefix = "model.layers." + std::to_string(index);
  const auto load_norm = [&](const std::string& name) -> Result<RmsNorm> {
    auto norm = RmsNorm::load(source, prefix + "." + name + ".weight", config.hidden_size, config.rms_norm_eps);
    if (norm.ok()) norm->weight_offset = options.norm_weight_offset;
    return norm;
  };
  auto input_norm = load_norm("input_layernorm");
  if (!input_norm.ok()) return input_norm.error();
  auto post_norm = load_norm("post_attention_layernorm");
  if (!post_norm.ok()) return post_norm.error();

  std::optional<DecoderAttention> attention;
  if (options.mla) {
    auto mla = MlaLayer::load(source, prefix + ".self_attn", *options.mla, rope);
    if (!mla.ok()) return mla.error();
    attention.emplace(std::in_place_type<MlaLayer>, std::move(*mla));
  } else {
    AttentionOptions attention_options;
    attention_options.qkv_bias = options.qkv_bias;
    attention_options.o_bias = options.o_bias;
    attention_options.qk_norm = options.qk_norm;
    attention_options.qk_norm_weight_offset = options.norm_weight_offset;
    attention_options.query_pre_attn_scalar = config.query_pre_attn_scalar;
    attention_options.sinks = options.attention_sinks;
    if (static_cast<size_t>(index) < config.layer_sliding_window.size()) {
      attention_options.sliding_window = config.layer_sliding_window[static_cast<size_t>(index)];
    }
    const bool local_rope = attention_options.sliding_window > 0 && sliding_rope != nullptr;
    const RopeTable& layer_rope = local_rope ? *sliding_rope : rope;
    auto gqa = AttentionLayer::load(source, prefix + ".self_attn", attention_options, layer_rope);
    if (!gqa.ok()) return gqa.error();
    attention.emplace(std::in_place_type<AttentionLayer>, std::move(*gqa));
  }

  std::optional<DecoderFeedForward> ffn;
  const std::string ffn_prefix = prefix + "." + options.ffn_name;
  const auto is_moe = [&](int64_t i) { return options.moe && (!options.is_moe_layer || options.is_moe_layer(i)); };
  if (is_moe(index)) {
    int32_t moe_index = 0;  // MoE layers before this one: its placement under expert parallelism
    for (int64_t i = 0; i < index; ++i) moe_index += is_moe(i) ? 1 : 0;
    auto moe = MoeLayer::load(source, ffn_prefix, config.hidden_size, *options.moe, moe_index);
    if (!moe.ok()) return moe.error();
    ffn.emplace(std::in_place_type<MoeLayer>, std::move(*moe));
  } else {
    auto activation = parse_mlp_activation(config.hidden_activation);
    if (!activation.ok()) return Error{activation.error().message + " by " + config.architecture};
    auto mlp = GatedMlp::load(source, ffn_prefix, config.hidden_size, config.intermediate_size, options.mlp_bias,
                              *activation);
    if (!mlp.ok()) return mlp.error();
    ffn.emplace(std::in_place_type<GatedMlp>, *mlp);
  }
  DecoderLayer layer{*input_norm, std::move(*attention), *post_norm, std::move(*ffn), std::nullopt, std::nullopt};
  if (options.sandwich_norms) {
    auto pre_ffn_norm = load_norm("pre_feedforward_layernorm");
    if (!pre_ffn_norm.ok()) return pre_ffn_norm.error();
    auto post_ffn_norm = load_norm("post_feedforward_layernorm");
    if (!post_ffn_norm.ok()) return post_ffn_norm.error();
    layer.pre_feedforward_norm = *pre_ffn_norm;
    layer.post_feedforward_norm = *post_ffn_norm;
  }
  return layer;
}

Result<std::unique_ptr<CausalLM>> DenseDecoder::load(const ModelSource& source, const DenseDecoderOptions& options) {
  const ModelConfig& config = source.config;
  std::unique_ptr<DenseDecoder> model(new DenseDecoder(source));
  const int64_t rope_dim = options.mla ? options.mla->qk_rope_head_dim : config.head_dim;
  auto rope = make_rope_table(config.rope, rope_dim, config.max_position_embeddings);
  if (!rope.ok()) return Error{"config.json: " + rope.error().message};
  std::optional<RopeTable> sliding_rope;
  if (config.sliding_rope) {
    auto table = make_rope_table(*config.sliding_rope, rope_dim, config.max_position_embeddings);
    if (!table.ok()) return Error{"config.json: sliding-window layers' " + table.error().message};
    sliding_rope = std::move(*table);
  }

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
  model->final_norm_.weight_offset = options.norm_weight_offset;
  if (options.scale_embeddings) {
    // transformers: torch.tensor(hidden_size ** 0.5) (float32), cast to the embedding's dtype.
    const auto scale = static_cast<float>(std::sqrt(static_cast<double>(config.hidden_size)));
    model->embedding_scale_ = embed->dtype == DType::kBF16  ? bf16_to_f32(f32_to_bf16(scale))
                              : embed->dtype == DType::kF16 ? f16_to_f32(f32_to_f16(scale))
                                                            : scale;
  }
  model->image_encoder_ = options.image_encoder;
  if (config.final_logit_softcapping) model->final_logit_softcap_ = static_cast<float>(*config.final_logit_softcapping);

  for (int64_t i = 0; i < config.num_hidden_layers; ++i) {
    auto layer = load_layer(source, options, i, *rope, sliding_rope ? &*sliding_rope : nullptr);
    if (!layer.ok()) return layer.error();
    model->layers_.push_back(std::move(*layer));
  }
  DI_TRY(model->load_mtp_layers(source, options, *rope));
  if (source.expert_parallel) {
    const auto is_moe = [](const Layer& layer) { return std::holds_alternative<MoeLayer>(layer.ffn); };
    if (std::none_of(model->layers_.begin(), model->layers_.end(), is_moe)) {
      return Error{config.architecture + " has no MoE layers: expert parallelism needs a mixture-of-experts model"};
    }
    std::vector<MoeLayer*> moved;
    for (Layer& layer : model->layers_) {
      if (auto* moe = std::get_if<MoeLayer>(&layer.ffn)) moved.push_back(moe);
    }
    std::vector<const MoeLayer*> fixed;
    for (const MtpLayerWeights& mtp : model->mtp_layers_) {
      if (const auto* moe = std::get_if<MoeLayer>(&mtp.block.ffn)) fixed.push_back(moe);
    }
    auto rebalancer = ExpertRebalancer::create(source, std::move(moved), std::move(fixed));
    if (!rebalancer.ok()) return rebalancer.error();
    model->rebalancer_ = std::move(*rebalancer);
  }
  model->residual_stream_dtype_ = model->residual_stream_dtype();
  // An expert-parallel forward waits on the group's exchanges from the host, which a graph cannot hold.
  if (source.backend->can_capture() && !source.expert_parallel) {
    model->graphs_ = std::make_unique<DecodeGraphs>();
    model->draft_graphs_ = std::make_unique<DecodeGraphs>();
  }
  return std::unique_ptr<CausalLM>(std::move(model));
}

Result<void> DenseDecoder::load_mtp_layers(const ModelSource& source, const DenseDecoderOptions& options,
                                           const RopeTable& rope) {
  const ModelConfig& config = source.config;
  const int64_t hidden = config.hidden_size;
  const int64_t count = config.raw.value("num_nextn_predict_layers", int64_t{0});
  for (int64_t i = config.num_hidden_layers; i < config.num_hidden_layers + count; ++i) {
    const std::string prefix = "model.layers." + std::to_string(i);
    // transformers drops these layers when it saves, so checkpoints without them still load.
    if (!weights_->find(prefix + ".eh_proj.weight")) return {};
    auto block = load_layer(source, options, i, rope);
    if (!block.ok()) return block.error();
    auto enorm = RmsNorm::load(source, prefix + ".enorm.weight", hidden, config.rms_norm_eps);
    if (!enorm.ok()) return enorm.error();
    auto hnorm = RmsNorm::load(source, prefix + ".hnorm.weight", hidden, config.rms_norm_eps);
    if (!hnorm.ok()) return hnorm.error();
    auto eh_proj = Linear::load(source, prefix + ".eh_proj", hidden, 2 * hidden, false);
    if (!eh_proj.ok()) return eh_proj.error();
    auto head_norm = RmsNorm::load(source, prefix + ".shared_head.norm.weight", hidden, config.rms_norm_eps);
    if (!head_norm.ok()) return head_norm.error();
    auto head = load_tensor(source, prefix + ".shared_head.head.weight", {config.vocab_size, hidden});
    if (!head.ok()) return head.error();
    MtpLayerWeights mtp{*enorm, *hnorm, *eh_proj, *head_norm, *head, std::nullopt, std::nullopt, std::move(*block)};
    if (weights_->find(prefix + ".embed_tokens.weight")) {
      auto embed = load_tensor(source, prefix + ".embed_tokens.weight", {config.vocab_size, hidden});
      if (!embed.ok()) return embed.error();
      mtp.embed_tokens = *embed;
    }
    if (weights_->find(prefix + ".confidence_head.weight")) {
      auto confidence = Linear::load(source, prefix + ".confidence_head", 1, hidden, true);
      if (!confidence.ok()) return confidence.error();
      mtp.confidence_head = *confidence;
    }
    mtp_layers_.push_back(std::move(mtp));
  }
  return {};
}

int64_t DenseDecoder::kv_bytes_per_token() const {
  int64_t bytes = 0;
  for (const Layer& layer : layers_) {
    bytes += std::visit([](const auto& a) { return a.kv_bytes_per_token(); }, layer.attention);
  }
  return bytes;
}

DType DenseDecoder::kv_cache_dtype() const {
  if (layers_.empty()) return DType::kF32;
  return std::visit([](const auto& a) { return a.kv_cache_dtype(); }, layers_.front().attention);
}

void DenseDecoder::allocate_kv_cache(const KvCacheShape& shape) {
  clear_graphs();  // they point into the old cache
  kv_shape_ = shape;
  for (Layer& layer : layers_) std::visit([&](auto& a) { a.allocate_kv_cache(backend_, shape); }, layer.attention);
}

void DenseDecoder::copy_kv_blocks(const std::vector<std::pair<int32_t, int32_t>>& src_dst) {
  for (const Layer& layer : layers_) {
    const auto* gqa = std::get_if<AttentionLayer>(&layer.attention);
    if (gqa != nullptr && gqa->uses_swa_tables(kv_shape_)) continue;  // copy_swa_kv_blocks' ids
    for (const auto& [src, dst] : src_dst) {
      std::visit([&](const auto& a) { a.copy_kv_block(backend_, src, dst); }, layer.attention);
    }
  }
}

int64_t DenseDecoder::swa_kv_bytes_per_token() const {
  int64_t swa_bytes = 0;
  bool has_full_layer = false;
  for (const Layer& layer : layers_) {
    const auto* gqa = std::get_if<AttentionLayer>(&layer.attention);
    if (gqa != nullptr && gqa->sliding_window() > 0) {
      swa_bytes += gqa->kv_bytes_per_token();
    } else {
      has_full_layer = true;
    }
  }
  return has_full_layer ? swa_bytes : 0;
}

void DenseDecoder::copy_swa_kv_blocks(const std::vector<std::pair<int32_t, int32_t>>& src_dst) {
  for (const Layer& layer : layers_) {
    const auto* gqa = std::get_if<AttentionLayer>(&layer.attention);
    if (gqa == nullptr || !gqa->uses_swa_tables(kv_shape_)) continue;
    for (const auto& [src, dst] : src_dst) gqa->copy_kv_block(backend_, src, dst);
  }
}

int64_t DenseDecoder::kv_floats_per_block() const {
  int64_t floats = 0;
  for (const Layer& layer : layers_) floats += kv_floats_per_block_of(layer.attention);
  return floats;
}

void DenseDecoder::read_kv_blocks(const std::vector<int32_t>& block_ids, float* host) const {
  DI_CHECK(kv_shape_.num_swa_blocks == 0, "read_kv_blocks needs a cache whose layers share block ids");
  for (int32_t block : block_ids) {
    for (const Layer& layer : layers_) {
      std::visit([&](const auto& a) { a.read_kv_block(backend_, block, host); }, layer.attention);
      host += kv_floats_per_block_of(layer.attention);
    }
  }
}

void DenseDecoder::write_kv_blocks(const std::vector<int32_t>& block_ids, const float* host) {
  DI_CHECK(kv_shape_.num_swa_blocks == 0, "write_kv_blocks needs a cache whose layers share block ids");
  DI_CHECK(kv_cache_dtype() != DType::kF8E4M3,
           "write_kv_blocks takes float32 values, which an fp8 cache would have to code with its scales; "
           "move an fp8 cache's own bytes with write_full_kv_blocks");
  // All pieces in one call: a device backend then loads a pinned page with one launch.
  std::vector<HostPiece> pieces;
  size_t offset = 0;
  for (int32_t block : block_ids) {
    for (const Layer& layer : layers_) {
      std::visit([&](const auto& a) { a.kv_block_pieces(block, offset, pieces); }, layer.attention);
      offset += static_cast<size_t>(kv_floats_per_block_of(layer.attention)) * sizeof(float);
    }
  }
  backend_.scatter_to_device(reinterpret_cast<const uint8_t*>(host), pieces);
}

bool DenseDecoder::uses_full_tables(const Layer& layer) const {
  const auto* gqa = std::get_if<AttentionLayer>(&layer.attention);
  return gqa == nullptr || !gqa->uses_swa_tables(kv_shape_);
}

int64_t DenseDecoder::full_kv_bytes_per_block() const {
  int64_t bytes = 0;
  for (const Layer& layer : layers_) {
    if (uses_full_tables(layer)) bytes += kv_bytes_per_block_of(layer.attention);
  }
  return bytes;
}

void DenseDecoder::read_full_kv_blocks(const std::vector<int32_t>& block_ids, uint8_t* host) const {
  for (int32_t block : block_ids) {
    for (const Layer& layer : layers_) {
      if (!uses_full_tables(layer)) continue;
      std::visit([&](const auto& a) { a.read_kv_block_raw(backend_, block, host); }, layer.attention);
      host += kv_bytes_per_block_of(layer.attention);
    }
  }
}

void DenseDecoder::write_full_kv_blocks(const std::vector<int32_t>& block_ids, const uint8_t* host) {
  // All pieces in one call: a device backend then loads a pinned page with one launch.
  std::vector<HostPiece> pieces;
  size_t offset = 0;
  for (int32_t block : block_ids) {
    for (const Layer& layer : layers_) {
      if (!uses_full_tables(layer)) continue;
      std::visit([&](const auto& a) { a.raw_kv_block_pieces(block, offset, pieces); }, layer.attention);
      offset += static_cast<size_t>(kv_bytes_per_block_of(layer.attention));
    }
  }
  backend_.scatter_to_device(host, pieces);
}

bool DenseDecoder::is_of(const Layer& layer, KvLayers layers) {
  const auto* gqa = std::get_if<AttentionLayer>(&layer.attention);
  return (gqa != nullptr && gqa->sliding_window() > 0) == (layers == KvLayers::kSliding);
}

int64_t DenseDecoder::handover_kv_bytes_per_block(KvLayers layers) const {
  int64_t bytes = 0;
  for (const Layer& layer : layers_) {
    if (is_of(layer, layers)) bytes += kv_bytes_per_block_of(layer.attention);
  }
  return bytes;
}

void DenseDecoder::read_handover_kv_blocks(KvLayers layers, const std::vector<int32_t>& block_ids,
                                           uint8_t* host) const {
  for (int32_t block : block_ids) {
    for (const Layer& layer : layers_) {
      if (!is_of(layer, layers)) continue;
      DI_CHECK(block >= 0, "the handover reads a block released from the window");
      std::visit([&](const auto& a) { a.read_kv_block_raw(backend_, block, host); }, layer.attention);
      host += kv_bytes_per_block_of(layer.attention);
    }
  }
}

void DenseDecoder::write_handover_kv_blocks(KvLayers layers, const std::vector<int32_t>& block_ids,
                                            const uint8_t* host) {
  std::vector<HostPiece> pieces;
  size_t offset = 0;
  for (int32_t block : block_ids) {
    for (const Layer& layer : layers_) {
      if (!is_of(layer, layers)) continue;
      DI_CHECK(block >= 0, "the handover writes a block released from the window");
      std::visit([&](const auto& a) { a.raw_kv_block_pieces(block, offset, pieces); }, layer.attention);
      offset += static_cast<size_t>(kv_bytes_per_block_of(layer.attention));
    }
  }
  backend_.scatter_to_device(host, pieces);
}

std::vector<CausalLM::HandoverLayer> DenseDecoder::handover_layers() const {
  std::vector<HandoverLayer> result;
  int32_t num_full = 0;
  int32_t num_sliding = 0;
  for (const Layer& layer : layers_) {
    const bool sliding = is_of(layer, KvLayers::kSliding);
    result.push_back({sliding ? KvLayers::kSliding : KvLayers::kFull, sliding ? num_sliding++ : num_full++,
                      kv_bytes_per_block_of(layer.attention)});
  }
  return result;
}

std::unique_ptr<PendingCopies> DenseDecoder::read_handover_layer_blocks_later(int32_t layer,
                                                                              const std::vector<int32_t>& block_ids,
                                                                              uint8_t* host) const {
  DI_CHECK(layer >= 0 && static_cast<size_t>(layer) < layers_.size(), "layer " << layer << " out of range");
  const Layer& from = layers_[static_cast<size_t>(layer)];
  const auto bytes = static_cast<size_t>(kv_bytes_per_block_of(from.attention));
  std::vector<HostPiece> pieces;
  for (size_t i = 0; i < block_ids.size(); ++i) {
    DI_CHECK(block_ids[i] >= 0, "the handover reads a block released from the window");
    std::visit([&](const auto& a) { a.raw_kv_block_pieces(block_ids[i], i * bytes, pieces); }, from.attention);
  }
  std::vector<HostCopy> copies;
  copies.reserve(pieces.size());
  for (const HostPiece& piece : pieces) copies.push_back({host + piece.src_offset, piece.dst, piece.src_bytes});
  return backend_.copy_to_host_later(copies);
}

int64_t DenseDecoder::weight_bytes_per_token() const {
  const auto element = [](const kernels::WeightView& w) { return static_cast<int64_t>(dtype_size_bytes(w.dtype)); };
  int64_t bytes = embed_tokens_.cols * element(embed_tokens_) + lm_head_.rows * lm_head_.cols * element(lm_head_);
  for (const Layer& layer : layers_) {
    bytes += std::visit([](const auto& a) { return a.weight_bytes(); }, layer.attention);
    // A MoE layer counts the experts one token reads (top_k of them), not all of them.
    bytes += std::visit([](const auto& f) { return f.weight_bytes(); }, layer.ffn);
    bytes += (layer.pre_feedforward_norm ? 4 : 2) * config_.hidden_size * element(layer.input_norm.weight);
  }
  return bytes;
}

ExpertTokenCounts DenseDecoder::expert_token_counts() const {
  ExpertTokenCounts counts;
  for (size_t i = 0; i < layers_.size(); ++i) {
    if (const auto* moe = std::get_if<MoeLayer>(&layers_[i].ffn)) {
      counts.layer_ids.push_back(static_cast<int64_t>(i));
      counts.counts.push_back(moe->expert_token_counts(backend_));
    }
  }
  return counts;
}

void DenseDecoder::reset_expert_token_counts() {
  for (const Layer& layer : layers_) {
    if (const auto* moe = std::get_if<MoeLayer>(&layer.ffn)) moe->reset_expert_token_counts(backend_);
  }
}

int64_t DenseDecoder::routed_weight_bytes_per_step() const {
  int64_t bytes = weight_bytes_per_token();
  for (const Layer& layer : layers_) {
    const auto* moe = std::get_if<MoeLayer>(&layer.ffn);
    if (moe == nullptr) continue;
    const std::vector<int64_t> counts = moe->expert_token_counts(backend_);
    const auto active = std::count_if(counts.begin(), counts.end(), [](int64_t count) { return count > 0; });
    bytes += (static_cast<int64_t>(active) - moe->top_k()) * moe->expert_bytes();
  }
  return bytes;
}

void DenseDecoder::clear_graphs() {
  if (graphs_) graphs_->clear();
  if (draft_graphs_) draft_graphs_->clear();
}

void DenseDecoder::ensure_workspace(int64_t num_tokens, int64_t num_logit_rows) {
  if (num_tokens > workspace_tokens_) {
    const int64_t hidden = config_.hidden_size;
    int64_t scratch = 2 * num_tokens * config_.intermediate_size;
    for (const Layer& layer : layers_) {
      scratch = std::max({scratch, attention_scratch_floats(layer.attention, num_tokens),
                          ffn_scratch_floats(layer.ffn, num_tokens)});
    }
    const auto floats = [](int64_t count) { return static_cast<size_t>(count) * sizeof(float); };
    // Before the old buffers go: a failed allocation below must leave no graph reading them.
    clear_graphs();
    hidden_ = backend_.allocate(floats(num_tokens * hidden));
    normed_ = backend_.allocate(floats(num_tokens * hidden));
    delta_ = backend_.allocate(floats(num_tokens * hidden));
    scratch_ = backend_.allocate(floats(scratch));
    workspace_tokens_ = num_tokens;
  }
  if (num_logit_rows > workspace_logit_rows_) {
    clear_graphs();
    logit_hidden_ = backend_.allocate(static_cast<size_t>(num_logit_rows * config_.hidden_size) * sizeof(float));
    logits_ = backend_.allocate(static_cast<size_t>(num_logit_rows * config_.vocab_size) * sizeof(float));
    workspace_logit_rows_ = num_logit_rows;
  }
}

const kernels::SampleParams* DenseDecoder::run_forward(const ForwardBatch& batch,
                                                       const std::vector<kernels::SampleParams>* draws) {
  const int64_t num_tokens = batch.num_tokens();
  const auto num_logit_rows = static_cast<int64_t>(batch.logit_rows.size());
  DI_CHECK(num_tokens > 0, "forward needs at least one token");
  for (int32_t row : batch.logit_rows) DI_CHECK(row >= 0 && row < num_tokens, "logit row " << row << " out of range");
  if (expert_parallel_) join_group_forward(GroupForward::kDecoder, num_tokens);
  DI_CHECK((batch.embedding_rows.empty() && batch.images_to_encode.empty()) || image_encoder_,
           "images for a model that reads none");
  for (const ForwardBatch::ImageToEncode& image : batch.images_to_encode) {
    if (image.ready->load()) continue;
    image_encoder_->encode(image.pixels, image.grid, image.rows);
    image.ready->store(true);
  }
  StepExtras extras;
  extras.previous_draws = drawn_tokens_.as<int32_t>();
  extras.draws = draws;
  extras.hidden_size = config_.hidden_size;
  const bool decode_step = DecodeGraphs::can_run(batch);
  const int32_t padded = decode_step ? DecodeGraphs::shape_for(batch).num_seqs : 0;
  if (graphs_ && decode_step && !batch.after_layer &&
      std::none_of(layers_.begin(), layers_.end(), [&](const Layer& layer) { return reads_back(layer.ffn, padded); })) {
    ensure_workspace(padded, padded);
    return graphs_->run(backend_, batch, kv_shape_.block_size, extras,
                        [&](const DeviceBatch& device_batch) { enqueue_forward(device_batch, nullptr); });
  }
  // Every row's logits in order (a decode step): no gather, the head reads normed directly.
  bool all_rows = num_logit_rows == num_tokens;
  for (int64_t r = 0; all_rows && r < num_logit_rows; ++r) all_rows = batch.logit_rows[static_cast<size_t>(r)] == r;
  ensure_workspace(num_tokens, all_rows ? num_tokens : std::max<int64_t>(num_logit_rows, 1));
  // A decode step keeps its block table on the device, as in a graph (no padded rows here).
  PaddedShape decode_shape;
  if (decode_step) {
    decode_shape = {batch.num_seqs(), DecodeGraphs::shape_for(batch).width};
    extras.shape = &decode_shape;
  }
  const DeviceBatch device_batch = inputs_.upload(backend_, batch, kv_shape_.block_size, extras);
  finish_inputs(backend_, device_batch);
  enqueue_forward(device_batch, all_rows ? nullptr : &batch.logit_rows,
                  batch.after_layer ? &batch.after_layer : nullptr);
  wait_for_exchanges();
  return device_batch.draws;
}

bool DenseDecoder::reads_back(const DecoderFeedForward& ffn, int64_t num_tokens) const {
  const auto* moe = std::get_if<MoeLayer>(&ffn);
  return moe != nullptr && moe->step_reads_back(backend_, num_tokens);
}

bool DenseDecoder::request_expert_rebalance() {
  if (!rebalancer_) return false;
  rebalancer_->request();
  return true;
}

bool DenseDecoder::run_idle_step() {
  if (!expert_parallel_) return false;
  ++group_rounds_;
  const ExpertParallelism::Vote vote = rebalancer_->start_round(0, GroupForward::kDecoder);
  if (vote.max_tokens == 0) return false;
  run_idle_forward(vote.kind);
  return true;
}

void DenseDecoder::join_group_forward(GroupForward kind, int64_t num_tokens) {
  for (;;) {
    ++group_rounds_;
    const GroupForward chosen = rebalancer_->start_round(num_tokens, kind).kind;
    if (chosen == kind) return;
    run_idle_forward(chosen);
  }
}

void DenseDecoder::run_idle_forward(GroupForward kind) {
  const auto idle = [&](const DecoderFeedForward& ffn) {
    if (const auto* moe = std::get_if<MoeLayer>(&ffn)) moe->forward(backend_, nullptr, 0, scratch_.as<float>(), nullptr);
  };
  if (kind == GroupForward::kDraftModule) {
    DI_CHECK(!mtp_layers_.empty(), "the group ran a draft-module forward this rank's model does not have");
    idle(mtp_layers_.back().block.ffn);
    wait_for_exchanges();
    return;
  }
  for (const Layer& layer : layers_) idle(layer.ffn);
  wait_for_exchanges();
}

void DenseDecoder::enqueue_forward(const DeviceBatch& batch, const std::vector<int32_t>* logit_rows,
                                   const std::function<void(int32_t)>* after_layer) {
  const int64_t num_tokens = batch.num_tokens;
  const int64_t hidden = config_.hidden_size;
  auto* residual = hidden_.as<float>();
  auto* normed = normed_.as<float>();
  auto* delta = delta_.as<float>();
  auto* scratch = scratch_.as<float>();

  backend_.embedding(embed_tokens_, batch.token_ids.as<int32_t>(), num_tokens, residual);
  if (embedding_scale_ != 1.0f) backend_.scale(residual, num_tokens * hidden, embedding_scale_, residual);
  for (const DeviceBatch::EmbeddingRows& image : batch.embedding_rows) {
    backend_.copy_on_device(residual + int64_t{image.first_token} * hidden, image.rows,
                            static_cast<size_t>(int64_t{image.num_tokens} * hidden) * sizeof(float));
  }
  const bool residual_stream = runs_residual_stream(num_tokens);
  // DeepStack (Qwen3-VL): an image's set i + 1 of rows joins its tokens' hidden state after layer i,
  // through the residual, or through the layer's output the next norm adds to it.
  const auto add_deepstack_rows = [&](size_t i) {
    for (const DeviceBatch::EmbeddingRows& image : batch.embedding_rows) {
      if (static_cast<int32_t>(i) + 1 >= image.num_sets) continue;
      float* target = (residual_stream ? residual : delta) + int64_t{image.first_token} * hidden;
      const int64_t count = int64_t{image.num_tokens} * hidden;
      backend_.add(target, image.rows + static_cast<int64_t>(i + 1) * count, count, target);
    }
  };
  for (size_t i = 0; i < layers_.size(); ++i) {
    const Layer& layer = layers_[i];
    if (residual_stream) {
      enqueue_residual_layer(layer, batch);
      add_deepstack_rows(i);
      if (after_layer != nullptr) {
        wait_for_exchanges();
        (*after_layer)(static_cast<int32_t>(i));
      }
      continue;
    }
    if (i == 0) {
      layer.input_norm.forward(backend_, residual, num_tokens, normed);
    } else {
      layer.input_norm.add_forward(backend_, residual, delta, num_tokens, normed);
    }
    std::visit([&](const auto& a) { a.forward(backend_, batch, normed, scratch, delta); }, layer.attention);
    if (layer.pre_feedforward_norm) {
      // Sandwich: residual += norm(attention); ffn(norm(residual)) is normalised again before the next add.
      layer.post_attention_norm.forward(backend_, delta, num_tokens, delta);
      layer.pre_feedforward_norm->add_forward(backend_, residual, delta, num_tokens, normed);
      std::visit([&](const auto& f) { f.forward(backend_, normed, num_tokens, scratch, delta); }, layer.ffn);
      layer.post_feedforward_norm->forward(backend_, delta, num_tokens, delta);
    } else {
      layer.post_attention_norm.add_forward(backend_, residual, delta, num_tokens, normed);
      std::visit([&](const auto& f) { f.forward(backend_, normed, num_tokens, scratch, delta); }, layer.ffn);
    }
    add_deepstack_rows(i);
    if (after_layer != nullptr) {
      wait_for_exchanges();
      (*after_layer)(static_cast<int32_t>(i));
    }
  }
  if (residual_stream) {
    final_norm_.forward(backend_, residual, num_tokens, normed);
  } else {
    final_norm_.add_forward(backend_, residual, delta, num_tokens, normed);
  }
  const int64_t num_logit_rows = logit_rows != nullptr ? static_cast<int64_t>(logit_rows->size()) : num_tokens;
  if (num_logit_rows == 0) return;

  const float* head_input = normed;
  if (logit_rows != nullptr) {
    auto* logit_hidden = logit_hidden_.as<float>();
    for (int64_t r = 0; r < num_logit_rows; ++r) {
      backend_.copy_on_device(logit_hidden + r * hidden, normed + (*logit_rows)[static_cast<size_t>(r)] * hidden,
                              static_cast<size_t>(hidden) * sizeof(float));
    }
    head_input = logit_hidden;
  }
  backend_.matmul(head_input, lm_head_, kernels::WeightView{}, num_logit_rows, logits_.as<float>());
  if (final_logit_softcap_) {
    float* capped = logits_.as<float>();
    backend_.softcap(capped, num_logit_rows * config_.vocab_size, *final_logit_softcap_, capped);
  }
}

}  // namespace deepinfer
