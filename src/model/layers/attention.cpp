// Grouped-query self-attention over the paged KV cache.
#include "model/layers/attention.h"

#include <algorithm>
#include <cmath>
#include <optional>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "core/check.h"
#include "runtime/device_upload.h"

namespace deepinfer {
namespace {

// q, k and v stacked into one device weight, and their biases into one bias, where the backend
// stacks (16-bit weights, or FP8 ones it keeps packed; 16-bit biases) and the layer may take them
// stacked.
struct StackedQkv {
  kernels::WeightView weight;
  kernels::WeightView bias;  // data null without biases
};
Result<std::optional<StackedQkv>> load_stacked_qkv(const ModelSource& source, const std::string& prefix, int64_t q_dim,
                                                   int64_t kv_dim, int64_t hidden, bool has_bias, bool may_stack) {
  if (!may_stack) return std::optional<StackedQkv>{};
  const std::pair<const char*, int64_t> projections[] = {{".q_proj", q_dim}, {".k_proj", kv_dim}, {".v_proj", kv_dim}};
  std::vector<TensorView> parts;
  std::vector<std::pair<std::string, std::vector<int64_t>>> names;
  for (const auto& [name, rows] : projections) {
    auto tensor = source.weights->get(prefix + name + ".weight", {rows, hidden});
    if (!tensor.ok()) return tensor.error();
    parts.push_back(*tensor);
    names.emplace_back(prefix + name + ".weight", std::vector<int64_t>{rows, hidden});
  }
  StackedQkv stacked;
  if (has_bias) {
    // Each bias as a one-column matrix, stacked as the weights' rows are.
    std::vector<TensorView> biases;
    for (const auto& [name, rows] : projections) {
      auto bias = source.weights->get(prefix + name + ".bias", {rows});
      if (!bias.ok()) return bias.error();
      biases.push_back(*bias);
      biases.back().shape = {rows, 1};
    }
    auto bias = source.backend->load_stacked_weight(biases);
    if (!bias.ok()) return bias.error();
    if (!*bias) return std::optional<StackedQkv>{};
    stacked.bias = **bias;
  }
  const auto fp8 = [](const TensorView& part) { return part.dtype == DType::kF8E4M3; };
  Result<std::optional<kernels::WeightView>> weight = std::optional<kernels::WeightView>{};
  if (std::all_of(parts.begin(), parts.end(), fp8)) {
    weight = load_stacked_fp8(source, names);
  } else if (std::none_of(parts.begin(), parts.end(), fp8)) {
    weight = source.backend->load_stacked_weight(parts);
  }
  if (!weight.ok() || !*weight) source.backend->release_weight(stacked.bias);
  if (!weight.ok()) return weight.error();
  if (!*weight) return std::optional<StackedQkv>{};
  stacked.weight = **weight;
  return std::optional<StackedQkv>{stacked};
}

}  // namespace

DeviceBatch DeviceBatch::upload(Backend& backend, const ForwardBatch& batch, int32_t block_size) {
  DI_CHECK(batch.positions.size() == batch.token_ids.size() && batch.slot_mapping.size() == batch.token_ids.size(),
           "positions and slot_mapping must have one entry per token");
  DI_CHECK(batch.query_start.size() == batch.seq_len.size() + 1, "query_start must have num_seqs + 1 entries");
  DI_CHECK(batch.block_table.size() == batch.seq_len.size() * static_cast<size_t>(batch.max_blocks_per_seq),
           "block_table must be [num_seqs, max_blocks_per_seq]");
  DeviceBatch device;
  device.token_ids = upload_vector(backend, batch.token_ids);
  device.positions = upload_vector(backend, batch.positions);
  if (!batch.mrope_positions.empty()) {
    DI_CHECK(batch.mrope_positions.size() == 2 * batch.token_ids.size(), "mrope_positions must be [2, num_tokens]");
    device.mrope_positions = upload_vector(backend, batch.mrope_positions);
  }
  device.slot_mapping = upload_vector(backend, batch.slot_mapping);
  device.query_start = upload_vector(backend, batch.query_start);
  device.seq_len = upload_vector(backend, batch.seq_len);
  device.block_table = upload_vector(backend, batch.block_table);
  device.num_tokens = batch.num_tokens();
  device.paged.num_seqs = batch.num_seqs();
  device.paged.query_start = device.query_start.as<int32_t>();
  device.paged.seq_len = device.seq_len.as<int32_t>();
  device.paged.block_table = device.block_table.as<int32_t>();
  device.paged.max_blocks_per_seq = batch.max_blocks_per_seq;
  device.paged.block_size = block_size;
  device.paged.num_tokens = static_cast<int32_t>(batch.num_tokens());
  device.paged.rows_share_sequences = batch.rows_share_sequences;
  for (int32_t s = 0; s < batch.num_seqs(); ++s) {
    const auto s_index = static_cast<size_t>(s);
    device.paged.max_query_len =
        std::max(device.paged.max_query_len, batch.query_start[s_index + 1] - batch.query_start[s_index]);
  }
  if (!batch.swa_block_table.empty()) {
    DI_CHECK(batch.swa_slot_mapping.size() == batch.token_ids.size() &&
                 batch.swa_block_table.size() == batch.block_table.size(),
             "swa_slot_mapping and swa_block_table must be shaped as slot_mapping and block_table");
    device.swa_slot_mapping = upload_vector(backend, batch.swa_slot_mapping);
    device.swa_block_table = upload_vector(backend, batch.swa_block_table);
    device.swa_paged = device.paged;
    device.swa_paged.block_table = device.swa_block_table.as<int32_t>();
    if (!batch.swa_seq_len.empty()) {
      DI_CHECK(batch.swa_seq_len.size() == batch.seq_len.size(), "swa_seq_len must be shaped as seq_len");
      device.swa_seq_len = upload_vector(backend, batch.swa_seq_len);
      device.swa_paged.seq_len = device.swa_seq_len.as<int32_t>();
    }
  }
  return device;
}

Result<KvCacheScales> KvCacheScales::load(const ModelSource& source, const std::string& prefix, DType cache_dtype,
                                          int32_t num_kv_heads, int32_t head_dim, bool keys_are_values) {
  KvCacheScales scales;
  if (cache_dtype != DType::kF8E4M3) return scales;
  const std::optional<TensorView> both = source.weights->find(prefix + ".kv_scale");
  const std::optional<TensorView> k = both ? both : source.weights->find(prefix + ".k_scale");
  const std::optional<TensorView> v = keys_are_values ? k : both ? both : source.weights->find(prefix + ".v_scale");
  if (!k && !v) return scales;
  if (!k || !v) return Error{prefix + " has only one of k_scale and v_scale; an fp8 KV cache needs both or neither"};
  Backend& backend = *source.backend;
  auto columns = [&](const TensorView& tensor, std::vector<float>& host, DeviceBuffer& device) -> Result<void> {
    const int64_t count = tensor.numel();
    const int64_t columns = int64_t{num_kv_heads} * head_dim;
    if ((count != 1 && count != num_kv_heads && count != columns) ||
        (tensor.dtype != DType::kF32 && tensor.dtype != DType::kBF16 && tensor.dtype != DType::kF16)) {
      return Error{"tensor " + tensor.name + " in " + tensor.file + " has dtype " +
                   std::string(dtype_name(tensor.dtype)) + " and shape " + shape_to_string(tensor.shape) +
                   "; a KV cache scale is F32, BF16 or F16 with 1 value, one per kv head (" +
                   std::to_string(num_kv_heads) + ") or one per column (" + std::to_string(columns) + ")"};
    }
    std::vector<float> values(static_cast<size_t>(count));
    convert_to_f32(tensor.data, tensor.dtype, values.size(), values.data());
    for (float value : values) {
      if (!std::isfinite(value) || value <= 0.0f) {
        return Error{"tensor " + tensor.name + " in " + tensor.file + " holds the KV cache scale " +
                     std::to_string(value) + "; scales must be positive and finite"};
      }
    }
    host.resize(static_cast<size_t>(num_kv_heads) * static_cast<size_t>(head_dim));
    for (size_t c = 0; c < host.size(); ++c) {
      host[c] = values[count == 1 ? 0 : count == columns ? c : c / static_cast<size_t>(head_dim)];
    }
    device = upload_vector(backend, host);
    return {};
  };
  if (auto loaded = columns(*k, scales.host_k, scales.k); !loaded.ok()) return loaded.error();
  if (auto loaded = columns(*v, scales.host_v, scales.v); !loaded.ok()) return loaded.error();
  return scales;
}

void KvCacheScales::apply(const std::vector<float>& scales, size_t count, float* values) {
  if (scales.empty()) return;
  for (size_t i = 0; i < count; ++i) values[i] *= scales[i % scales.size()];
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
  // M-RoPE rotates q and k before the front end, which needs them contiguous (no stacking); with
  // q/k norms it normalises them itself first, as the norms come before the rope.
  const bool mrope = !rope.mrope_axis.empty();
  auto stacked =
      load_stacked_qkv(source, prefix, layer.q_dim(), layer.kv_dim(), hidden, options.qkv_bias, /*may_stack=*/!mrope);
  if (!stacked.ok()) return stacked.error();
  if (*stacked) {
    layer.qkv_ = (*stacked)->weight;
    layer.qkv_bias_ = (*stacked)->bias;
  } else {
    auto q = Linear::load(source, prefix + ".q_proj", layer.q_dim(), hidden, options.qkv_bias);
    if (!q.ok()) return q.error();
    auto k = Linear::load(source, prefix + ".k_proj", layer.kv_dim(), hidden, options.qkv_bias);
    if (!k.ok()) return k.error();
    auto v = Linear::load(source, prefix + ".v_proj", layer.kv_dim(), hidden, options.qkv_bias);
    if (!v.ok()) return v.error();
    layer.q_proj_ = *q;
    layer.k_proj_ = *k;
    layer.v_proj_ = *v;
  }
  auto o = Linear::load(source, prefix + ".o_proj", hidden, layer.q_dim(), options.o_bias);
  if (!o.ok()) return o.error();
  layer.o_proj_ = *o;
  // 16-bit weights already bound the layer's precision; device backends may then run attention
  // on bf16 tensor cores.
  const DType weight_dtype = layer.qkv_ ? layer.qkv_->dtype : layer.q_proj_.weight.dtype;
  layer.params_.allow_bf16 = weight_dtype != DType::kF32;
  layer.params_.cache_dtype = source.backend->kv_cache_dtype(weight_dtype);
  auto cache_scales = KvCacheScales::load(source, prefix, layer.params_.cache_dtype, layer.params_.num_kv_heads,
                                          layer.params_.head_dim);
  if (!cache_scales.ok()) return cache_scales.error();
  layer.cache_scales_ = std::move(*cache_scales);
  layer.params_.cache_scales = layer.cache_scales_.view();
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
    layer.sinks_ = upload_vector(backend, values);
    layer.params_.sinks = layer.sinks_.as<float>();
  }
  layer.inv_freq_ = upload_vector(backend, rope.inv_freq);
  for (int8_t axis = 0; mrope && axis < 3; ++axis) {
    std::vector<float> masked(rope.inv_freq.size(), 0.0f);
    for (size_t i = 0; i < masked.size(); ++i) {
      if (rope.mrope_axis[i] == axis) masked[i] = rope.inv_freq[i];
    }
    layer.mrope_inv_freq_[axis] = upload_vector(backend, masked);
  }
  return layer;
}

int64_t AttentionLayer::weight_bytes() const {
  int64_t bytes = q_proj_.weight_bytes() + k_proj_.weight_bytes() + v_proj_.weight_bytes() + o_proj_.weight_bytes();
  if (qkv_) bytes += kernels::weight_bytes(*qkv_) + kernels::weight_bytes(qkv_bias_);
  if (q_norm_) bytes += 2 * params_.head_dim * static_cast<int64_t>(dtype_size_bytes(q_norm_->weight.dtype));
  return bytes;
}

void AttentionLayer::allocate_kv_cache(Backend& backend, const KvCacheShape& shape) {
  block_size_ = shape.block_size;
  swa_tables_ = uses_swa_tables(shape);
  const int32_t num_blocks = swa_tables_ ? shape.num_swa_blocks : shape.num_blocks;
  const auto rows = static_cast<size_t>(num_blocks) * static_cast<size_t>(shape.block_size);
  const size_t row_bytes = static_cast<size_t>(kv_dim()) * dtype_size_bytes(params_.cache_dtype);
  k_cache_ = backend.allocate(rows * row_bytes);
  v_cache_ = backend.allocate(rows * row_bytes);
}

size_t AttentionLayer::block_bytes() const {
  return static_cast<size_t>(block_size_ * kv_dim()) * dtype_size_bytes(params_.cache_dtype);
}

void AttentionLayer::copy_kv_block(Backend& backend, int32_t src_block, int32_t dst_block) const {
  const size_t bytes = block_bytes();
  for (const DeviceBuffer* cache : {&k_cache_, &v_cache_}) {
    auto* base = cache->as<uint8_t>();
    backend.copy_on_device(base + dst_block * bytes, base + src_block * bytes, bytes);
  }
}

void AttentionLayer::read_kv_block(Backend& backend, int32_t block, float* host) const {
  const int64_t floats = block_size_ * kv_dim();
  const size_t bytes = block_bytes();
  if (params_.cache_dtype == DType::kF32) {
    backend.copy_to_host(host, k_cache_.as<uint8_t>() + block * bytes, bytes);
    backend.copy_to_host(host + floats, v_cache_.as<uint8_t>() + block * bytes, bytes);
    return;
  }
  std::vector<uint8_t> raw(bytes);
  for (const auto& [cache, dst, scales] : {std::tuple{&k_cache_, host, &cache_scales_.host_k},
                                           std::tuple{&v_cache_, host + floats, &cache_scales_.host_v}}) {
    backend.copy_to_host(raw.data(), cache->as<uint8_t>() + block * bytes, bytes);
    convert_to_f32(raw.data(), params_.cache_dtype, static_cast<size_t>(floats), dst);
    KvCacheScales::apply(*scales, static_cast<size_t>(floats), dst);
  }
}

void AttentionLayer::kv_block_pieces(int32_t block, size_t src_offset, std::vector<HostPiece>& pieces) const {
  const size_t src_bytes = static_cast<size_t>(block_size_ * kv_dim()) * sizeof(float);
  const size_t bytes = block_bytes();
  pieces.push_back({k_cache_.as<uint8_t>() + block * bytes, src_offset, src_bytes, params_.cache_dtype});
  pieces.push_back({v_cache_.as<uint8_t>() + block * bytes, src_offset + src_bytes, src_bytes, params_.cache_dtype});
}

void AttentionLayer::read_kv_block_raw(Backend& backend, int32_t block, uint8_t* host) const {
  const size_t bytes = block_bytes();
  backend.copy_to_host(host, k_cache_.as<uint8_t>() + block * bytes, bytes);
  backend.copy_to_host(host + bytes, v_cache_.as<uint8_t>() + block * bytes, bytes);
}

void AttentionLayer::raw_kv_block_pieces(int32_t block, size_t src_offset, std::vector<HostPiece>& pieces) const {
  const size_t bytes = block_bytes();
  const DType dtype = params_.cache_dtype;
  pieces.push_back({k_cache_.as<uint8_t>() + block * bytes, src_offset, bytes, dtype, dtype});
  pieces.push_back({v_cache_.as<uint8_t>() + block * bytes, src_offset + bytes, bytes, dtype, dtype});
}

void AttentionLayer::forward(Backend& backend, const DeviceBatch& batch, const float* x, float* scratch,
                             float* out) const {
  const int64_t n = batch.num_tokens;
  if (qkv_) {
    backend.matmul(x, *qkv_, qkv_bias_, n, scratch);
  } else {
    float* q = scratch;
    float* k = q + n * q_dim();
    float* v = k + n * kv_dim();
    backend.matmul_group(x, n, {{q_proj_.weight, q_proj_.bias, q}, {k_proj_.weight, k_proj_.bias, k},
                                {v_proj_.weight, v_proj_.bias, v}});
  }
  o_proj_.forward(backend, attend(backend, batch, scratch), n, out);
}

void AttentionLayer::forward_residual(Backend& backend, const DeviceBatch& batch, const ResidualStream& stream,
                                      float* scratch) const {
  DI_CHECK(takes_residual_stream(), "forward_residual needs stacked q|k|v weights and no o_proj bias");
  const int64_t n = batch.num_tokens;
  backend.norm_matmul(stream.residual, stream.norm, *qkv_, n, stream.normed, scratch);
  backend.matmul_add(attend(backend, batch, scratch), o_proj_.weight, n, stream.delta, stream.residual);
}

float* AttentionLayer::attend(Backend& backend, const DeviceBatch& batch, float* scratch) const {
  DI_CHECK(k_cache_.data() != nullptr, "allocate_kv_cache must run before forward");
  const int64_t n = batch.num_tokens;
  kernels::AttentionFrontEnd front;
  float* attn = nullptr;  // [n, num_heads, head_dim]
  if (qkv_) {
    // One [q|k|v] row per token; the front end writes the rotated q after them, and attention's
    // output goes after that: a backend that folds the front end into attention still reads the
    // rows while it writes.
    const int64_t row = q_dim() + 2 * kv_dim();
    float* qkv = scratch;  // [n, row]
    front.q = qkv;
    front.k = qkv + q_dim();
    front.v = qkv + q_dim() + kv_dim();
    front.q_stride = front.k_stride = front.v_stride = row;
    front.q_out = qkv + n * row;  // [n, num_heads, head_dim]
    attn = front.q_out + n * q_dim();
  } else {
    float* q = scratch;              // [n, num_heads, head_dim]
    float* k = q + n * q_dim();      // [n, num_kv_heads, head_dim]
    float* v = k + n * kv_dim();     // [n, num_kv_heads, head_dim]
    attn = v + n * kv_dim();
    front.q = q;
    front.k = k;
    front.v = v;
    front.q_stride = q_dim();
    front.k_stride = kv_dim();
    front.v_stride = kv_dim();
  }
  DI_CHECK(!swa_tables_ || batch.swa_paged.block_table != nullptr,
           "this sliding-window layer keeps its own cache but the batch has no swa tables");
  const DeviceBuffer& slots = swa_tables_ ? batch.swa_slot_mapping : batch.slot_mapping;
  front.num_tokens = n;
  front.num_heads = params_.num_heads;
  front.num_kv_heads = params_.num_kv_heads;
  front.head_dim = params_.head_dim;
  const bool mrope = batch.mrope_positions.data() != nullptr && mrope_inv_freq_[0].data() != nullptr;
  if (q_norm_ && mrope_inv_freq_[0].data() != nullptr) {
    // Normalised here, before the height and width rotations below (the front end rotates after it
    // normalises); on every step, so a token's norm is the same arithmetic whatever shares its step.
    q_norm_->forward(backend, front.q, n * params_.num_heads, front.q);
    k_norm_->forward(backend, front.k, n * params_.num_kv_heads, front.k);
  } else if (q_norm_) {
    front.q_norm = q_norm_->weight;
    front.k_norm = k_norm_->weight;
    front.norm_weight_offset = q_norm_->weight_offset;
    front.norm_eps = q_norm_->eps;
  }
  front.positions = batch.positions.as<int32_t>();
  front.rotary_dim = rotary_dim_;
  front.inv_freq = inv_freq_.as<float>();
  if (mrope) {
    // The height and width sections here, the temporal one in the front end.
    DI_CHECK(!qkv_, "M-RoPE needs q and k apart");
    const auto* rows = batch.mrope_positions.as<int32_t>();
    for (int32_t s = 1; s < 3; ++s) {
      const int32_t* positions = rows + (s - 1) * n;
      const float* inv_freq = mrope_inv_freq_[s].as<float>();
      backend.rope(front.q, positions, n, params_.num_heads, params_.head_dim, rotary_dim_, inv_freq, 1.0f,
                   kernels::RopeLayout::kRotateHalf);
      backend.rope(front.k, positions, n, params_.num_kv_heads, params_.head_dim, rotary_dim_, inv_freq, 1.0f,
                   kernels::RopeLayout::kRotateHalf);
    }
    front.inv_freq = mrope_inv_freq_[0].as<float>();
  }
  front.attention_scaling = rope_attention_scaling_;
  front.slot_mapping = slots.as<int32_t>();
  front.cache_dtype = params_.cache_dtype;
  front.cache_scales = params_.cache_scales;
  front.k_cache = k_cache_.data();
  front.v_cache = v_cache_.data();
  backend.attention_with_front_end(front, swa_tables_ ? batch.swa_paged : batch.paged, params_, attn);
  return attn;
}

}  // namespace deepinfer
