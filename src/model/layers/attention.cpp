// Grouped-query self-attention over the paged KV cache.
#include "model/layers/attention.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/check.h"

namespace deepinfer {
namespace {

DeviceBuffer upload_ints(Backend& backend, const std::vector<int32_t>& values) {
  DeviceBuffer buffer = backend.allocate(values.size() * sizeof(int32_t));
  if (!values.empty()) backend.copy_to_device(buffer.data(), values.data(), values.size() * sizeof(int32_t));
  return buffer;
}

}  // namespace

DeviceBatch DeviceBatch::upload(Backend& backend, const ForwardBatch& batch, int32_t block_size) {
  DI_CHECK(batch.positions.size() == batch.token_ids.size() && batch.slot_mapping.size() == batch.token_ids.size(),
           "positions and slot_mapping must have one entry per token");
  DI_CHECK(batch.query_start.size() == batch.seq_len.size() + 1, "query_start must have num_seqs + 1 entries");
  DI_CHECK(batch.block_table.size() == batch.seq_len.size() * static_cast<size_t>(batch.max_blocks_per_seq),
           "block_table must be [num_seqs, max_blocks_per_seq]");
  DeviceBatch device;
  device.token_ids = upload_ints(backend, batch.token_ids);
  device.positions = upload_ints(backend, batch.positions);
  device.slot_mapping = upload_ints(backend, batch.slot_mapping);
  device.query_start = upload_ints(backend, batch.query_start);
  device.seq_len = upload_ints(backend, batch.seq_len);
  device.block_table = upload_ints(backend, batch.block_table);
  device.num_tokens = batch.num_tokens();
  device.paged.num_seqs = batch.num_seqs();
  device.paged.query_start = device.query_start.as<int32_t>();
  device.paged.seq_len = device.seq_len.as<int32_t>();
  device.paged.block_table = device.block_table.as<int32_t>();
  device.paged.max_blocks_per_seq = batch.max_blocks_per_seq;
  device.paged.block_size = block_size;
  device.paged.num_tokens = static_cast<int32_t>(batch.num_tokens());
  for (int32_t s = 0; s < batch.num_seqs(); ++s) {
    const auto s_index = static_cast<size_t>(s);
    device.paged.max_query_len =
        std::max(device.paged.max_query_len, batch.query_start[s_index + 1] - batch.query_start[s_index]);
  }
  if (!batch.swa_block_table.empty()) {
    DI_CHECK(batch.swa_slot_mapping.size() == batch.token_ids.size() &&
                 batch.swa_block_table.size() == batch.block_table.size(),
             "swa_slot_mapping and swa_block_table must be shaped as slot_mapping and block_table");
    device.swa_slot_mapping = upload_ints(backend, batch.swa_slot_mapping);
    device.swa_block_table = upload_ints(backend, batch.swa_block_table);
    device.swa_paged = device.paged;
    device.swa_paged.block_table = device.swa_block_table.as<int32_t>();
    if (!batch.swa_seq_len.empty()) {
      DI_CHECK(batch.swa_seq_len.size() == batch.seq_len.size(), "swa_seq_len must be shaped as seq_len");
      device.swa_seq_len = upload_ints(backend, batch.swa_seq_len);
      device.swa_paged.seq_len = device.swa_seq_len.as<int32_t>();
    }
  }
  return device;
}

Result<AttentionLayer> AttentionLayer::load(const ModelSource& source, const std::string& prefix,
                                            const AttentionOptions& options, const RopeTable& rope) {
  const ModelConfig& config = source.config;
  AttentionLayer layer;
  layer.params_.num_heads = static_cast<int32_t>(config.num_attention_heads);
  layer.params_.num_kv_heads = static_cast<int32_t>(config.num_key_value_heads);
  layer.params_.head_dim = static_cast<int32_t>(config.head_dim);
  const double scale_denominator = options.query_pre_attn_scalar.value_or(static_cast<double>(config.head_dim));
  layer.params_.scale = static_cast<float>(1.0 / std::sqrt(scale_denominator));
  layer.params_.sliding_window = options.sliding_window;
  layer.rotary_dim_ = rope.rotary_dim;
  layer.rope_attention_scaling_ = rope.attention_scaling;
  const int64_t hidden = config.hidden_size;
  auto q = Linear::load(source, prefix + ".q_proj", layer.q_dim(), hidden, options.qkv_bias);
  if (!q.ok()) return q.error();
  auto k = Linear::load(source, prefix + ".k_proj", layer.kv_dim(), hidden, options.qkv_bias);
  if (!k.ok()) return k.error();
  auto v = Linear::load(source, prefix + ".v_proj", layer.kv_dim(), hidden, options.qkv_bias);
  if (!v.ok()) return v.error();
  auto o = Linear::load(source, prefix + ".o_proj", hidden, layer.q_dim(), options.o_bias);
  if (!o.ok()) return o.error();
  layer.q_proj_ = *q;
  layer.k_proj_ = *k;
  layer.v_proj_ = *v;
  layer.o_proj_ = *o;
  // 16-bit weights already bound the layer's precision; device backends may then run attention
  // on bf16 tensor cores.
  layer.params_.allow_bf16 = layer.q_proj_.weight.dtype != DType::kF32;
  if (options.qk_norm) {
    auto q_norm = RmsNorm::load(source, prefix + ".q_norm.weight", config.head_dim, config.rms_norm_eps);
    if (!q_norm.ok()) return q_norm.error();
    auto k_norm = RmsNorm::load(source, prefix + ".k_norm.weight", config.head_dim, config.rms_norm_eps);
    if (!k_norm.ok()) return k_norm.error();
    layer.q_norm_ = *q_norm;
    layer.k_norm_ = *k_norm;
    layer.q_norm_->weight_offset = options.qk_norm_weight_offset;
    layer.k_norm_->weight_offset = options.qk_norm_weight_offset;
  }
  Backend& backend = *source.backend;
  if (options.sinks) {
    // Read from the mapped file and widened to f32 here: the kernel takes f32 sinks.
    auto sinks = source.weights->get(prefix + ".sinks", {config.num_attention_heads});
    if (!sinks.ok()) return sinks.error();
    std::vector<float> values(static_cast<size_t>(config.num_attention_heads));
    if (sinks->dtype != DType::kF32 && sinks->dtype != DType::kBF16 && sinks->dtype != DType::kF16) {
      return Error{"tensor " + sinks->name + " in " + sinks->file + " has dtype " +
                   std::string(dtype_name(sinks->dtype)) + "; expected F32, BF16 or F16"};
    }
    convert_to_f32(sinks->data, sinks->dtype, values.size(), values.data());
    layer.sinks_ = backend.allocate(values.size() * sizeof(float));
    backend.copy_to_device(layer.sinks_.data(), values.data(), values.size() * sizeof(float));
    layer.params_.sinks = layer.sinks_.as<float>();
  }
  layer.inv_freq_ = backend.allocate(rope.inv_freq.size() * sizeof(float));
  backend.copy_to_device(layer.inv_freq_.data(), rope.inv_freq.data(), rope.inv_freq.size() * sizeof(float));
  return layer;
}

int64_t AttentionLayer::weight_bytes() const {
  int64_t bytes = q_proj_.weight_bytes() + k_proj_.weight_bytes() + v_proj_.weight_bytes() + o_proj_.weight_bytes();
  if (q_norm_) bytes += 2 * params_.head_dim * static_cast<int64_t>(dtype_size_bytes(q_norm_->weight.dtype));
  return bytes;
}

void AttentionLayer::allocate_kv_cache(Backend& backend, const KvCacheShape& shape) {
  block_size_ = shape.block_size;
  swa_tables_ = uses_swa_tables(shape);
  const int32_t num_blocks = swa_tables_ ? shape.num_swa_blocks : shape.num_blocks;
  const auto rows = static_cast<size_t>(num_blocks) * static_cast<size_t>(shape.block_size);
  k_cache_ = backend.allocate(rows * static_cast<size_t>(kv_dim()) * sizeof(float));
  v_cache_ = backend.allocate(rows * static_cast<size_t>(kv_dim()) * sizeof(float));
}

void AttentionLayer::copy_kv_block(Backend& backend, int32_t src_block, int32_t dst_block) const {
  const int64_t floats = block_size_ * kv_dim();
  const auto bytes = static_cast<size_t>(floats) * sizeof(float);
  backend.copy_on_device(k_cache_.as<float>() + dst_block * floats, k_cache_.as<float>() + src_block * floats, bytes);
  backend.copy_on_device(v_cache_.as<float>() + dst_block * floats, v_cache_.as<float>() + src_block * floats, bytes);
}

void AttentionLayer::read_kv_block(Backend& backend, int32_t block, float* host) const {
  const int64_t floats = block_size_ * kv_dim();
  const auto bytes = static_cast<size_t>(floats) * sizeof(float);
  backend.copy_to_host(host, k_cache_.as<float>() + block * floats, bytes);
  backend.copy_to_host(host + floats, v_cache_.as<float>() + block * floats, bytes);
}

void AttentionLayer::write_kv_block(Backend& backend, int32_t block, const float* host) const {
  const int64_t floats = block_size_ * kv_dim();
  const auto bytes = static_cast<size_t>(floats) * sizeof(float);
  backend.copy_to_device(k_cache_.as<float>() + block * floats, host, bytes);
  backend.copy_to_device(v_cache_.as<float>() + block * floats, host + floats, bytes);
}

void AttentionLayer::forward(Backend& backend, const DeviceBatch& batch, const float* x, float* scratch,
                             float* out) const {
  DI_CHECK(k_cache_.data() != nullptr, "allocate_kv_cache must run before forward");
  const int64_t n = batch.num_tokens;
  float* q = scratch;                 // [n, num_heads, head_dim]
  float* k = q + n * q_dim();         // [n, num_kv_heads, head_dim]
  float* v = k + n * kv_dim();        // [n, num_kv_heads, head_dim]
  float* attn = v + n * kv_dim();     // [n, num_heads, head_dim]
  q_proj_.forward(backend, x, n, q);
  k_proj_.forward(backend, x, n, k);
  v_proj_.forward(backend, x, n, v);
  if (q_norm_) {
    q_norm_->forward(backend, q, n * params_.num_heads, q);
    k_norm_->forward(backend, k, n * params_.num_kv_heads, k);
  }
  const auto* positions = batch.positions.as<int32_t>();
  const auto* inv_freq = inv_freq_.as<float>();
  backend.rope(q, positions, n, params_.num_heads, params_.head_dim, rotary_dim_, inv_freq,
               rope_attention_scaling_, kernels::RopeLayout::kRotateHalf);
  backend.rope(k, positions, n, params_.num_kv_heads, params_.head_dim, rotary_dim_, inv_freq,
               rope_attention_scaling_, kernels::RopeLayout::kRotateHalf);
  DI_CHECK(!swa_tables_ || batch.swa_paged.block_table != nullptr,
           "this sliding-window layer keeps its own cache but the batch has no swa tables");
  const DeviceBuffer& slots = swa_tables_ ? batch.swa_slot_mapping : batch.slot_mapping;
  backend.write_kv(k, v, slots.as<int32_t>(), n, kv_dim(), k_cache_.as<float>(), v_cache_.as<float>());
  backend.paged_attention(q, k_cache_.as<float>(), v_cache_.as<float>(), swa_tables_ ? batch.swa_paged : batch.paged,
                          params_, attn);
  o_proj_.forward(backend, attn, n, out);
}

}  // namespace deepinfer
