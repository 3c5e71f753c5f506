// Attention in a vision tower, where every token of a sequence (a whole image, or one window of it)
// sees every other token of that sequence: the paged attention op over the sequences laid one after
// another, each on pages of its own in a scratch cache, each token looking ahead to its sequence's
// end (kernels::PagedBatch::lookahead), so the kernels share each key tile among the queries.
#pragma once

#include <cstdint>
#include <vector>

#include "runtime/backend.h"

namespace deepinfer {

class VisionAttentionBatch {
 public:
  // Keys a page of the scratch cache holds: any size works; 16 suits every backend's attention.
  static constexpr int32_t kBlockSize = 16;

  // Sequences of these lengths, in order, over the tower's rows.
  static VisionAttentionBatch make(Backend& backend, const std::vector<int32_t>& lengths);

  // The scratch cache's rows (of num_kv_heads * head_dim values each) that attend needs.
  int64_t cache_rows() const { return int64_t{num_blocks_} * kBlockSize; }
  // q, k, v, out: [tokens, num_heads * head_dim] float32 rows in the sequences' order; k_cache and
  // v_cache: cache_rows() rows of params.cache_dtype.
  void attend(Backend& backend, const float* q, const float* k, const float* v, const kernels::AttentionParams& params,
              void* k_cache, void* v_cache, float* out) const;

 private:
  DeviceBuffer query_start_, seq_len_, block_table_, lookahead_, slots_;
  kernels::PagedBatch paged_;
  int32_t num_blocks_ = 0;
};

}  // namespace deepinfer
