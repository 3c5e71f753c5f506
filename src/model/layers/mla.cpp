// Multi-head latent attention over a latent KV cache: weight-absorbed, or expanded for prompt chunks.
#include "model/layers/mla.h"

#include <cmath>

#include "core/check.h"
#include "runtime/device_upload.h"

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
  // Dequantised whatever the backend: head_matmul reads per-head slices of its rows (w_uv_ below).
  auto kv_b = Linear::load(source, prefix + ".kv_b_proj", heads * (nope + v_dim), lora, false, Packing::kDequantise);
  if (!kv_b.ok()) return kv_b.error();
  auto o = Linear::load(source, prefix + ".o_proj", hidden, heads * v_dim, options.attention_bias);
  if (!o.ok()) return o.error();
  layer.kv_a_proj_ = *kv_a;
  layer.kv_a_norm_ = *kv_norm;
  layer.kv_b_proj_ = *kv_b;
  layer.o_proj_ = *o;
  // The latent cache takes the element type the backend gives these weights (bf16 for 16-bit ones
  // on CUDA), as the GQA caches do.
  layer.cache_dtype_ = source.backend->kv_cache_dtype(layer.kv_b_proj_.weight.dtype);
  // K and V are one latent row, written and read with one scale: k_scale's.
  auto cache_scales = KvCacheScales::load(source, prefix, layer.cache_dtype_, 1,
                                          static_cast<int32_t>(layer.kv_row_floats()), /*keys_are_values=*/true);
  if (!cache_scales.ok()) return cache_scales.error();
  layer.cache_scales_ = std::move(*cache_scales);

  // kv_b_proj rows per head: nope rows of W_UK, then v rows of W_UV, each over the latent. The
  // absorbed query needs each head's W_UK transposed: one [heads * lora, nope] tensor.
  auto kv_b_host = read_tensor_f32(source, prefix + ".kv_b_proj.weight", {heads * (nope + v_dim), lora});
  if (!kv_b_host.ok()) return kv_b_host.error();
  std::vector<float> transposed(static_cast<size_t>(heads * lora * nope));
  for (int64_t h = 0; h < heads; ++h) {
    const float* w_uk = kv_b_host->data() + h * (nope + v_dim) * lora;
    float* w_uk_t = transposed.data() + h * lora * nope;
    for (int64_t i = 0; i < nope; ++i) {
      for (int64_t c = 0; c < lora; ++c) w_uk_t[c * nope + i] = w_uk[i * lora + c];
    }
  }
  const DType dtype = host_rewrite_dtype(layer.kv_b_proj_.weight.dtype);
  auto w_uk_t = load_host_tensor(source, prefix + ".kv_b_proj.w_uk_t", heads * lora, nope, transposed, dtype);
  if (!w_uk_t.ok()) return w_uk_t.error();
  layer.w_uk_t_ = *w_uk_t;
  layer.w_uk_t_.rows = lora;
  layer.w_uv_ = layer.kv_b_proj_.weight;
  const size_t element = dtype_size_bytes(layer.w_uv_.dtype);
  layer.w_uv_.data = static_cast<const char*>(layer.w_uv_.data) + static_cast<size_t>(nope * lora) * element;
  layer.w_uv_.rows = v_dim;
  Backend& backend = *source.backend;
  layer.inv_freq_ = upload_vector(backend, rope.inv_freq);
  return layer;
}

int64_t MlaLayer::weight_bytes() const {
  // The absorbed form reads W_UK^T and the W_UV rows of kv_b_proj, not kv_b_proj's W_UK rows.
  int64_t bytes = kv_a_proj_.weight_bytes() + o_proj_.weight_bytes();
  for (const kernels::WeightView* w : {&w_uk_t_, &w_uv_}) {
    bytes += options_.num_heads * w->rows * w->cols * static_cast<int64_t>(dtype_size_bytes(w->dtype));
  }
  if (q_proj_) bytes += q_proj_->weight_bytes();
  if (q_a_proj_) bytes += q_a_proj_->weight_bytes() + q_b_proj_->weight_bytes();
  return bytes;
}

void MlaLayer::allocate_kv_cache(Backend& backend, const KvCacheShape& shape) {
  block_size_ = shape.block_size;
  const auto rows = static_cast<size_t>(shape.num_blocks) * static_cast<size_t>(shape.block_size);
  cache_ = backend.allocate(rows * static_cast<size_t>(kv_row_floats()) * dtype_size_bytes(cache_dtype_));
}

void MlaLayer::copy_kv_block(Backend& backend, int32_t src_block, int32_t dst_block) const {
  const auto bytes = static_cast<size_t>(kv_bytes_per_block());
  auto* base = cache_.as<uint8_t>();
  backend.copy_on_device(base + dst_block * bytes, base + src_block * bytes, bytes);
}

void MlaLayer::read_kv_block(Backend& backend, int32_t block, float* host) const {
  const auto bytes = static_cast<size_t>(kv_bytes_per_block());
  if (cache_dtype_ == DType::kF32) {
    backend.copy_to_host(host, cache_.as<uint8_t>() + block * bytes, bytes);
    return;
  }
  std::vector<uint8_t> raw(bytes);
  backend.copy_to_host(raw.data(), cache_.as<uint8_t>() + block * bytes, bytes);
  convert_to_f32(raw.data(), cache_dtype_, static_cast<size_t>(kv_floats_per_block()), host);
  KvCacheScales::apply(cache_scales_.host_k, static_cast<size_t>(kv_floats_per_block()), host);
}

void MlaLayer::kv_block_pieces(int32_t block, size_t src_offset, std::vector<HostPiece>& pieces) const {
  const auto bytes = static_cast<size_t>(kv_bytes_per_block());
  pieces.push_back({cache_.as<uint8_t>() + block * bytes, src_offset,
                    static_cast<size_t>(kv_floats_per_block()) * sizeof(float), cache_dtype_});
}

void MlaLayer::read_kv_block_raw(Backend& backend, int32_t block, uint8_t* host) const {
  const auto bytes = static_cast<size_t>(kv_bytes_per_block());
  backend.copy_to_host(host, cache_.as<uint8_t>() + block * bytes, bytes);
}

void MlaLayer::raw_kv_block_pieces(int32_t block, size_t src_offset, std::vector<HostPiece>& pieces) const {
  const auto bytes = static_cast<size_t>(kv_bytes_per_block());
  pieces.push_back({cache_.as<uint8_t>() + block * bytes, src_offset, bytes, cache_dtype_, cache_dtype_});
}

int64_t MlaLayer::scratch_floats(int64_t num_tokens) const {
  const int64_t heads = options_.num_heads;
  const int64_t row = kv_row_floats();
  // head_matmul's scratch: one head's input and output rows, the widest of both products.
  const int64_t per_head = options_.qk_nope_head_dim + options_.kv_lora_rank + options_.v_head_dim;
  return num_tokens * (options_.q_lora_rank + heads * q_head_dim() + row + options_.kv_lora_rank +
                       2 * heads * row + per_head + heads * options_.v_head_dim);
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
  float* q_lora = scratch;                       // [n, q_lora_rank]
  float* q = q_lora + n * options_.q_lora_rank;  // [n, heads, nope + rope]
  float* kv = q + n * heads * qd;                // [n, lora + rope]: the cache row
  float* latent = kv + n * row;                  // [n, lora]
  float* q_latent = latent + n * lora;           // [n, heads, lora + rope]: absorbed query
  float* attn = q_latent + n * heads * row;      // [n, heads, lora + rope]: attended latent
  float* head_scratch = attn + n * heads * row;  // head_matmul's: [n, nope + lora + v]
  float* values = head_scratch + n * (nope + lora + v_dim);  // [n, heads, v]

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
  void* cache = cache_.data();
  const kernels::KvScales scales{cache_scales_.k.as<float>(), cache_scales_.k.as<float>()};
  backend.write_kv(kv, kv, batch.slot_mapping.as<int32_t>(), n, row, cache_dtype_, scales, cache, cache);

  const auto num_heads = static_cast<int32_t>(heads);
  // Prompt chunks take the expanded form where the backend runs it on tensor cores.
  if (backend.mla_expanded_attention(batch.paged, {.q = q,
                                                   .latent_cache = cache,
                                                   .cache_dtype = cache_dtype_,
                                                   .cache_scales = scales,
                                                   .kv_b = kv_b_proj_.weight,
                                                   .num_heads = num_heads,
                                                   .kv_lora_rank = static_cast<int32_t>(lora),
                                                   .nope = static_cast<int32_t>(nope),
                                                   .rope = static_cast<int32_t>(rope_dim),
                                                   .v_dim = static_cast<int32_t>(v_dim),
                                                   .scale = options_.softmax_scale,
                                                   .out = values})) {
    o_proj_.forward(backend, values, n, out);
    return;
  }
  // q_latent[t, h] = [q_nope[t, h] @ W_UK_h ; q_rope[t, h]]: scores against the latent row equal
  // the expanded q.k of every head.
  backend.head_matmul({.x = q, .x_row_stride = heads * qd, .x_head_stride = qd, .w = w_uk_t_, .w_head_stride = lora,
                       .num_heads = num_heads, .num_rows = n, .y = q_latent, .y_row_stride = heads * row,
                       .y_head_stride = row},
                      head_scratch);
  backend.copy_rows(q + nope, qd, n * heads, rope_dim, q_latent + lora, row);
  // One shared "kv head" whose keys and values are both the cache row; the rope part of the
  // attended value is discarded below.
  kernels::AttentionParams params;
  params.num_heads = num_heads;
  params.num_kv_heads = 1;
  params.head_dim = static_cast<int32_t>(row);
  params.scale = options_.softmax_scale;
  params.cache_dtype = cache_dtype_;
  params.cache_scales = scales;
  backend.paged_attention(q_latent, cache, cache, batch.paged, params, attn);
  backend.head_matmul({.x = attn, .x_row_stride = heads * row, .x_head_stride = row, .w = w_uv_,
                       .w_head_stride = nope + v_dim, .num_heads = num_heads, .num_rows = n, .y = values,
                       .y_row_stride = heads * v_dim, .y_head_stride = v_dim},
                      head_scratch);
  o_proj_.forward(backend, values, n, out);
}

}  // namespace deepinfer
