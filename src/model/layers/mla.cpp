// Multi-head latent attention, weight-absorbed over a latent KV cache.
#include "model/layers/mla.h"

#include <algorithm>
#include <cmath>

#include "core/check.h"

namespace deepinfer {

Result<MlaOptions> mla_options_from_config(const ModelConfig& config) {
  if (!config.mla) return Error{"config.json: " + config.architecture + " needs kv_lora_rank and the other MLA fields"};
  const MlaConfig& mla = *config.mla;
  MlaOptions options;
  options.num_heads = static_cast<int32_t>(config.num_attention_heads);
  options.q_lora_rank = mla.q_lora_rank.value_or(0);
  options.kv_lora_rank = mla.kv_lora_rank;
  options.qk_nope_head_dim = mla.qk_nope_head_dim;
  options.qk_rope_head_dim = mla.qk_rope_head_dim;
  options.v_head_dim = mla.v_head_dim;
  options.attention_bias = config.attention_bias;
  double scale = 1.0 / std::sqrt(static_cast<double>(mla.qk_nope_head_dim + mla.qk_rope_head_dim));
  if (config.rope.type == RopeType::kYarn && config.rope.mscale_all_dim != 0.0 && config.rope.factor > 1.0) {
    const double mscale = 0.1 * config.rope.mscale_all_dim * std::log(config.rope.factor) + 1.0;
    scale *= mscale * mscale;
  }
  options.softmax_scale = static_cast<float>(scale);
  return options;
}

Result<MlaLayer> MlaLayer::load(const ModelSource& source, const std::string& prefix, const MlaOptions& options,
                                const RopeTable& rope) {
  const ModelConfig& config = source.config;
  const int64_t hidden = config.hidden_size;
  const int64_t heads = options.num_heads;
  const int64_t nope = options.qk_nope_head_dim;
  const int64_t lora = options.kv_lora_rank;
  const int64_t v_dim = options.v_head_dim;
  if (rope.rotary_dim != options.qk_rope_head_dim) {
    return Error{"config.json: qk_rope_head_dim (" + std::to_string(options.qk_rope_head_dim) +
                 ") must equal the rotary dimension (" + std::to_string(rope.rotary_dim) + ")"};
  }
  MlaLayer layer;
  layer.options_ = options;
  layer.rotary_dim_ = rope.rotary_dim;
  layer.rope_attention_scaling_ = rope.attention_scaling;
  const int64_t q_out = heads * layer.q_head_dim();
  if (options.q_lora_rank == 0) {
    auto q = Linear::load(source, prefix + ".q_proj", q_out, hidden, false);
    if (!q.ok()) return q.error();
    layer.q_proj_ = *q;
  } else {
    auto q_a = Linear::load(source, prefix + ".q_a_proj", options.q_lora_rank, hidden, options.attention_bias);
    if (!q_a.ok()) return q_a.error();
    auto q_norm = RmsNorm::load(source, prefix + ".q_a_layernorm.weight", options.q_lora_rank, config.rms_norm_eps);
    if (!q_norm.ok()) return q_norm.error();
    auto q_b = Linear::load(source, prefix + ".q_b_proj", q_out, options.q_lora_rank, false);
    if (!q_b.ok()) return q_b.error();
    layer.q_a_proj_ = *q_a;
    layer.q_a_norm_ = *q_norm;
    layer.q_b_proj_ = *q_b;
  }
  auto kv_a = Linear::load(source, prefix + ".kv_a_proj_with_mqa", layer.kv_row_floats(), hidden,
                           options.attention_bias);
  if (!kv_a.ok()) return kv_a.error();
  auto kv_norm = RmsNorm::load(source, prefix + ".kv_a_layernorm.weight", lora, config.rms_norm_eps);
  if (!kv_norm.ok()) return kv_norm.error();
  auto kv_b = Linear::load(source, prefix + ".kv_b_proj", heads * (nope + v_dim), lora, false);
  if (!kv_b.ok()) return kv_b.error();
  auto o = Linear::load(source, prefix + ".o_proj", hidden, heads * v_dim, options.attention_bias);
  if (!o.ok()) return o.error();
  layer.kv_a_proj_ = *kv_a;
  layer.kv_a_norm_ = *kv_norm;
  layer.kv_b_proj_ = *kv_b;
  layer.o_proj_ = *o;

  // kv_b_proj rows per head: nope rows of W_UK, then v rows of W_UV, each over the latent.
  auto kv_b_host = read_tensor_f32(source, prefix + ".kv_b_proj.weight", {heads * (nope + v_dim), lora});
  if (!kv_b_host.ok()) return kv_b_host.error();
  const size_t element = dtype_size_bytes(layer.kv_b_proj_.weight.dtype);
  for (int64_t h = 0; h < heads; ++h) {
    std::vector<float> transposed(static_cast<size_t>(lora * nope));
    const float* w_uk = kv_b_host->data() + h * (nope + v_dim) * lora;
    for (int64_t i = 0; i < nope; ++i) {
      for (int64_t c = 0; c < lora; ++c) transposed[static_cast<size_t>(c * nope + i)] = w_uk[i * lora + c];
    }
    // A BF16 checkpoint's values round-trip exactly, so the transposed copy keeps its dtype.
    const DType dtype = layer.kv_b_proj_.weight.dtype == DType::kBF16 ? DType::kBF16 : DType::kF32;
    auto w_uk_t = load_host_tensor(source, prefix + ".kv_b_proj.w_uk_t." + std::to_string(h), lora, nope,
                                   transposed, dtype);
    if (!w_uk_t.ok()) return w_uk_t.error();
    layer.w_uk_t_.push_back(*w_uk_t);
    kernels::WeightView w_uv = layer.kv_b_proj_.weight;
    w_uv.data = static_cast<const char*>(w_uv.data) + static_cast<size_t>((h * (nope + v_dim) + nope) * lora) * element;
    w_uv.rows = v_dim;
    layer.w_uv_.push_back(w_uv);
  }
  Backend& backend = *source.backend;
  layer.inv_freq_ = backend.allocate(rope.inv_freq.size() * sizeof(float));
  backend.copy_to_device(layer.inv_freq_.data(), rope.inv_freq.data(), rope.inv_freq.size() * sizeof(float));
  return layer;
}

int64_t MlaLayer::weight_bytes() const {
  // The absorbed form reads W_UK^T and the W_UV rows of kv_b_proj, not kv_b_proj's W_UK rows.
  int64_t bytes = kv_a_proj_.weight_bytes() + o_proj_.weight_bytes();
  for (const auto* views : {&w_uk_t_, &w_uv_}) {
    for (const kernels::WeightView& w : *views) bytes += w.rows * w.cols * static_cast<int64_t>(dtype_size_bytes(w.dtype));
  }
  if (q_proj_) bytes += q_proj_->weight_bytes();
  if (q_a_proj_) bytes += q_a_proj_->weight_bytes() + q_b_proj_->weight_bytes();
  return bytes;
}

void MlaLayer::allocate_kv_cache(Backend& backend, const KvCacheShape& shape) {
  block_size_ = shape.block_size;
  const auto rows = static_cast<size_t>(shape.num_blocks) * static_cast<size_t>(shape.block_size);
  cache_ = backend.allocate(rows * static_cast<size_t>(kv_row_floats()) * sizeof(float));
}

void MlaLayer::copy_kv_block(Backend& backend, int32_t src_block, int32_t dst_block) const {
  const int64_t floats = kv_floats_per_block();
  backend.copy_on_device(cache_.as<float>() + dst_block * floats, cache_.as<float>() + src_block * floats,
                         static_cast<size_t>(floats) * sizeof(float));
}

void MlaLayer::read_kv_block(Backend& backend, int32_t block, float* host) const {
  const int64_t floats = kv_floats_per_block();
  backend.copy_to_host(host, cache_.as<float>() + block * floats, static_cast<size_t>(floats) * sizeof(float));
}

void MlaLayer::kv_block_pieces(int32_t block, size_t src_offset, std::vector<HostPiece>& pieces) const {
  const int64_t floats = kv_floats_per_block();
  pieces.push_back({cache_.as<float>() + block * floats, src_offset, static_cast<size_t>(floats) * sizeof(float),
                    DType::kF32});
}

int64_t MlaLayer::scratch_floats(int64_t num_tokens) const {
  const int64_t heads = options_.num_heads;
  const int64_t row = kv_row_floats();
  const int64_t per_head = std::max({options_.qk_nope_head_dim, options_.kv_lora_rank, options_.v_head_dim});
  return num_tokens * (options_.q_lora_rank + heads * q_head_dim() + row + options_.kv_lora_rank +
                       2 * heads * row + 2 * per_head + heads * options_.v_head_dim);
}

void MlaLayer::forward(Backend& backend, const DeviceBatch& batch, const float* x, float* scratch, float* out) const {
  DI_CHECK(cache_.data() != nullptr, "allocate_kv_cache must run before forward");
  const int64_t n = batch.num_tokens;
  const int64_t heads = options_.num_heads;
  const int64_t nope = options_.qk_nope_head_dim;
  const int64_t rope_dim = options_.qk_rope_head_dim;
  const int64_t lora = options_.kv_lora_rank;
  const int64_t v_dim = options_.v_head_dim;
  const int64_t qd = q_head_dim();
  const int64_t row = kv_row_floats();
  const int64_t per_head = std::max({nope, lora, v_dim});
  float* q_lora = scratch;                       // [n, q_lora_rank]
  float* q = q_lora + n * options_.q_lora_rank;  // [n, heads, nope + rope]
  float* kv = q + n * heads * qd;                // [n, lora + rope]: the cache row
  float* latent = kv + n * row;                  // [n, lora]
  float* q_latent = latent + n * lora;           // [n, heads, lora + rope]: absorbed query
  float* attn = q_latent + n * heads * row;      // [n, heads, lora + rope]: attended latent
  float* head_in = attn + n * heads * row;       // [n, per_head]: one head's slice, contiguous
  float* head_out = head_in + n * per_head;      // [n, per_head]
  float* values = head_out + n * per_head;       // [n, heads, v]

  if (q_proj_) {
    q_proj_->forward(backend, x, n, q);
  } else {
    q_a_proj_->forward(backend, x, n, q_lora);
    q_a_norm_->forward(backend, q_lora, n, q_lora);
    q_b_proj_->forward(backend, q_lora, n, q);
  }
  kv_a_proj_.forward(backend, x, n, kv);
  backend.copy_rows(kv, row, n, lora, latent, lora);
  kv_a_norm_.forward(backend, latent, n, latent);
  backend.copy_rows(latent, lora, n, lora, kv, row);
  // The rope dims sit after the nope dims in q and after the latent in kv: rotate from there.
  const auto* positions = batch.positions.as<int32_t>();
  const auto* inv_freq = inv_freq_.as<float>();
  backend.rope(q + nope, positions, n, static_cast<int32_t>(heads), static_cast<int32_t>(qd), rotary_dim_, inv_freq,
               rope_attention_scaling_, options_.rope_layout);
  backend.rope(kv + lora, positions, n, 1, static_cast<int32_t>(row), rotary_dim_, inv_freq, rope_attention_scaling_,
               options_.rope_layout);
  float* cache = cache_.as<float>();
  // The latent cache stays float32 (its wide rows take the float32 attention kernel only).
  backend.write_kv(kv, kv, batch.slot_mapping.as<int32_t>(), n, row, DType::kF32, cache, cache);

  // q_latent[t, h] = [q_nope[t, h] @ W_UK_h ; q_rope[t, h]]: scores against the latent row equal
  // the expanded q.k of every head.
  for (int64_t h = 0; h < heads; ++h) {
    backend.copy_rows(q + h * qd, heads * qd, n, nope, head_in, nope);
    backend.matmul(head_in, w_uk_t_[static_cast<size_t>(h)], kernels::WeightView{}, n, head_out);
    backend.copy_rows(head_out, lora, n, lora, q_latent + h * row, heads * row);
    backend.copy_rows(q + h * qd + nope, heads * qd, n, rope_dim, q_latent + h * row + lora, heads * row);
  }
  // One shared "kv head" whose keys and values are both the cache row; the rope part of the
  // attended value is discarded below.
  kernels::AttentionParams params;
  params.num_heads = static_cast<int32_t>(heads);
  params.num_kv_heads = 1;
  params.head_dim = static_cast<int32_t>(row);
  params.scale = options_.softmax_scale;
  backend.paged_attention(q_latent, cache, cache, batch.paged, params, attn);
  for (int64_t h = 0; h < heads; ++h) {
    backend.copy_rows(attn + h * row, heads * row, n, lora, head_in, lora);
    backend.matmul(head_in, w_uv_[static_cast<size_t>(h)], kernels::WeightView{}, n, head_out);
    backend.copy_rows(head_out, v_dim, n, v_dim, values + h * v_dim, heads * v_dim);
  }
  o_proj_.forward(backend, values, n, out);
}

}  // namespace deepinfer
