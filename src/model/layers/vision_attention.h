// Attention in a vision tower, where every token of a sequence (a whole image, or one window of it)
// sees every other token of that sequence: the paged attention op over the sequences laid one after
// another, each on pages of its own in a scratch cache, each token looking ahead to its sequence's
// end (kernels::PagedBatch::lookahead), so the kernels share each key tile among the queries.
#pragma once

#include <cstdint>
#include <vector>

#include "runtime/backend.h"

namespace deepinfer {

// A tower's buffers for one image of rows float32 rows of width values: the residual stream, the
// normed rows, q, k, v, attention's output, a sub-layer's output, and attention's scratch K/V cache
// (cache_rows rows each).
struct VisionTowerBuffers {
  VisionTowerBuffers(Backend& backend, int64_t rows, int64_t width, int64_t cache_rows);
  DeviceBuffer x, normed, q, k, v, attended, delta, k_cache, v_cache;
};

// Attention's parameters for a tower of hidden width over num_heads heads (every head its own keys),
// bf16 tensor cores allowed when the tower's weights are 16-bit; the keys live for one call, so the
// scratch cache is float32 whatever --kv-cache-dtype says.
kernels::AttentionParams vision_attention_params(int64_t hidden, int64_t num_heads, DType weight_dtype);

class VisionAttentionBatch {
 public:
  // Keys a page of the scratch cache holds: any size works; 16 suits every backend's attention.
  static constexpr int32_t kBlockSize = 16;

  // Sequences of these lengths, in order, over the tower's rows.
  static VisionAttentionBatch make(Backend& backend, const std::vector<int32_t>& lengths);

  // The scratch cache's rows (of num_kv_heads * head_dim values each) that attend needs.
  int64_t cache_rows() const { return int64_t{num_blocks_} * kBlockSize; }
  // buffers.q, k, v: [tokens, num_heads * head_dim] rows in the sequences' order, attended into
  // buffers.attended; the buffers' cache holds at least cache_rows() rows (params.cache_dtype kF32).
  void attend(Backend& backend, VisionTowerBuffers& buffers, const kernels::AttentionParams& params) const;

 private:
  DeviceBuffer query_start_, seq_len_, block_table_, lookahead_, slots_;
  kernels::PagedBatch paged_;
  int32_t num_blocks_ = 0;
};

}  // namespace deepinfer
