// VisionAttentionBatch: the index arrays of a tower's attention, made once per image shape.
#include "model/layers/vision_attention.h"

#include <algorithm>
#include <cmath>

#include "core/check.h"
#include "runtime/device_upload.h"

namespace deepinfer {

kernels::AttentionParams vision_attention_params(int64_t hidden, int64_t num_heads, DType weight_dtype) {
  kernels::AttentionParams params;
  params.num_heads = static_cast<int32_t>(num_heads);
  params.num_kv_heads = params.num_heads;
  params.head_dim = static_cast<int32_t>(hidden / num_heads);
  params.scale = 1.0f / std::sqrt(static_cast<float>(params.head_dim));
  params.allow_bf16 = weight_dtype != DType::kF32;
  params.cache_dtype = DType::kF32;
  return params;
}

VisionAttentionBatch VisionAttentionBatch::make(Backend& backend, const std::vector<int32_t>& lengths) {
  int32_t max_blocks = 0;
  for (int32_t length : lengths) max_blocks = std::max(max_blocks, (length + kBlockSize - 1) / kBlockSize);
  std::vector<int32_t> query_start = {0}, seq_len, lookahead, slots;
  std::vector<int32_t> table(lengths.size() * static_cast<size_t>(max_blocks), 0);
  VisionAttentionBatch batch;
  int32_t max_length = 0;
  for (size_t s = 0; s < lengths.size(); ++s) {
    const int32_t length = lengths[s];
    const int32_t blocks = (length + kBlockSize - 1) / kBlockSize;
    for (int32_t b = 0; b < blocks; ++b) {
      table[s * static_cast<size_t>(max_blocks) + static_cast<size_t>(b)] = batch.num_blocks_ + b;
    }
    for (int32_t p = 0; p < length; ++p) {
      lookahead.push_back(length - 1 - p);
      slots.push_back(batch.num_blocks_ * kBlockSize + p);
    }
    batch.num_blocks_ += blocks;
    query_start.push_back(query_start.back() + length);
    seq_len.push_back(length);
    max_length = std::max(max_length, length);
  }
  batch.query_start_ = upload_vector(backend, query_start);
  batch.seq_len_ = upload_vector(backend, seq_len);
  batch.block_table_ = upload_vector(backend, table);
  batch.lookahead_ = upload_vector(backend, lookahead);
  batch.slots_ = upload_vector(backend, slots);
  kernels::PagedBatch& paged = batch.paged_;
  paged.num_seqs = static_cast<int32_t>(lengths.size());
  paged.query_start = batch.query_start_.as<int32_t>();
  paged.seq_len = batch.seq_len_.as<int32_t>();
  paged.block_table = batch.block_table_.as<int32_t>();
  paged.max_blocks_per_seq = max_blocks;
  paged.block_size = kBlockSize;
  paged.num_tokens = query_start.back();
  paged.max_query_len = max_length;
  paged.lookahead = batch.lookahead_.as<int32_t>();
  return batch;
}

VisionTowerBuffers::VisionTowerBuffers(Backend& backend, int64_t rows, int64_t width, int64_t cache_rows)
    : x(allocate_elements<float>(backend, rows * width)),
      normed(allocate_elements<float>(backend, rows * width)),
      q(allocate_elements<float>(backend, rows * width)),
      k(allocate_elements<float>(backend, rows * width)),
      v(allocate_elements<float>(backend, rows * width)),
      attended(allocate_elements<float>(backend, rows * width)),
      delta(allocate_elements<float>(backend, rows * width)),
      k_cache(allocate_elements<float>(backend, cache_rows * width)),
      v_cache(allocate_elements<float>(backend, cache_rows * width)) {}

void VisionAttentionBatch::attend(Backend& backend, VisionTowerBuffers& buffers,
                                  const kernels::AttentionParams& params) const {
  DI_CHECK(params.cache_dtype == DType::kF32, "a tower's scratch cache is float32");
  const int64_t width = int64_t{params.num_kv_heads} * params.head_dim;
  backend.write_kv(buffers.k.as<float>(), buffers.v.as<float>(), slots_.as<int32_t>(), paged_.num_tokens, width,
                   params.cache_dtype, {}, buffers.k_cache.data(), buffers.v_cache.data());
  backend.paged_attention(buffers.q.as<float>(), buffers.k_cache.data(), buffers.v_cache.data(), paged_, params,
                          buffers.attended.as<float>());
}

}  // namespace deepinfer
