// Reference KV-cache write and paged causal GQA attention (sliding window, sinks and lookahead
// optional), float64 softmax.
#include <algorithm>
#include <cmath>
#include <vector>

#include "core/check.h"
#include "kernels/ops.h"

namespace deepinfer::kernels::ref {
namespace {

// Element c of a cache row of dtype as KvScales defines it, one value at a time.
void encode(float value, DType dtype, const float* scales, int64_t c, void* row) {
  switch (dtype) {
    case DType::kF32:
      static_cast<float*>(row)[c] = value;
      return;
    case DType::kBF16:
      static_cast<uint16_t*>(row)[c] = f32_to_bf16(value);
      return;
    case DType::kF8E4M3:
      static_cast<uint8_t*>(row)[c] = f32_to_f8e4m3(scales != nullptr ? value / scales[c] : value);
      return;
    default:
      DI_CHECK(false, "a KV cache of " << dtype_name(dtype));
  }
}

float decode(const void* row, DType dtype, const float* scales, int64_t c) {
  switch (dtype) {
    case DType::kF32:
      return static_cast<const float*>(row)[c];
    case DType::kBF16:
      return bf16_to_f32(static_cast<const uint16_t*>(row)[c]);
    case DType::kF8E4M3: {
      const float code = f8e4m3_to_f32(static_cast<const uint8_t*>(row)[c]);
      return scales != nullptr ? code * scales[c] : code;
    }
    default:
      DI_CHECK(false, "a KV cache of " << dtype_name(dtype));
  }
  return 0.0f;
}

}  // namespace

void write_kv(const float* k, const float* v, const int32_t* slot_mapping, int64_t num_tokens, int64_t kv_dim,
              DType cache_dtype, KvScales scales, void* k_cache, void* v_cache) {
  const int64_t row_bytes = kv_dim * static_cast<int64_t>(dtype_size_bytes(cache_dtype));
  for (int64_t t = 0; t < num_tokens; ++t) {
    DI_CHECK(slot_mapping[t] >= 0, "token " << t << " has slot " << slot_mapping[t]);
    const int64_t slot = slot_mapping[t];
    for (int64_t c = 0; c < kv_dim; ++c) {
      encode(k[t * kv_dim + c], cache_dtype, scales.k, c, static_cast<uint8_t*>(k_cache) + slot * row_bytes);
      encode(v[t * kv_dim + c], cache_dtype, scales.v, c, static_cast<uint8_t*>(v_cache) + slot * row_bytes);
    }
  }
}

void paged_attention(const float* q, const void* k_cache, const void* v_cache, const PagedBatch& batch,
                     const AttentionParams& params, float* out) {
  const int32_t num_heads = params.num_heads;
  const int32_t head_dim = params.head_dim;
  DI_CHECK(params.num_kv_heads > 0 && num_heads % params.num_kv_heads == 0,
           "num_heads " << num_heads << ", num_kv_heads " << params.num_kv_heads);
  const int32_t group = num_heads / params.num_kv_heads;
  const int64_t cache_row = static_cast<int64_t>(params.num_kv_heads) * head_dim;  // elements per cache position
  const int64_t row_bytes = cache_row * static_cast<int64_t>(dtype_size_bytes(params.cache_dtype));

  std::vector<double> scores;
  std::vector<double> acc(static_cast<size_t>(head_dim));
  std::vector<float> row(static_cast<size_t>(head_dim));
  for (int32_t s = 0; s < batch.num_seqs; ++s) {
    const int32_t num_new = batch.query_start[s + 1] - batch.query_start[s];
    const int32_t seq_len = batch.seq_len[s];
    DI_CHECK(num_new <= seq_len, "sequence " << s << " has " << num_new << " new tokens but length " << seq_len);
    const int32_t* blocks = batch.block_table + static_cast<int64_t>(s) * batch.max_blocks_per_seq;
    // One kv head's slice of a cache position, as float32 values (in `row`).
    auto key_row = [&](const void* cache, const float* scales, int32_t pos, int32_t kv_head) {
      const int64_t block = blocks[pos / batch.block_size];
      const void* cached =
          static_cast<const uint8_t*>(cache) + (block * batch.block_size + pos % batch.block_size) * row_bytes;
      for (int32_t d = 0; d < head_dim; ++d) {
        row[static_cast<size_t>(d)] =
            decode(cached, params.cache_dtype, scales, static_cast<int64_t>(kv_head) * head_dim + d);
      }
      return row.data();
    };
    for (int32_t j = 0; j < num_new; ++j) {
      const int64_t token = batch.query_start[s] + j;
      const int32_t pos = seq_len - num_new + j;
      const int32_t last_key = pos + (batch.lookahead != nullptr ? batch.lookahead[token] : 0);
      DI_CHECK(last_key >= pos && last_key < seq_len,
               "token " << token << " looks " << last_key - pos << " keys ahead, past its sequence");
      for (int32_t h = 0; h < num_heads; ++h) {
        const int32_t kv_head = h / group;
        const float* qh = q + (token * num_heads + h) * head_dim;
        scores.assign(static_cast<size_t>(last_key) + 1, 0.0);
        // A sink is one more softmax logit with no value row.
        const double sink = params.sinks != nullptr ? params.sinks[h] : -INFINITY;
        double max_score = sink;
        for (int32_t k = 0; k <= last_key; ++k) {
          if (params.sliding_window != 0 && pos - k >= params.sliding_window) continue;
          const float* kr = key_row(k_cache, params.cache_scales.k, k, kv_head);
          double dot = 0.0;
          for (int32_t d = 0; d < head_dim; ++d) dot += static_cast<double>(qh[d]) * kr[d];
          scores[static_cast<size_t>(k)] = dot * params.scale;
          max_score = std::max(max_score, scores[static_cast<size_t>(k)]);
        }
        double denom = params.sinks != nullptr ? std::exp(sink - max_score) : 0.0;
        std::fill(acc.begin(), acc.end(), 0.0);
        for (int32_t k = 0; k <= last_key; ++k) {
          if (params.sliding_window != 0 && pos - k >= params.sliding_window) continue;
          const double p = std::exp(scores[static_cast<size_t>(k)] - max_score);
          denom += p;
          const float* vr = key_row(v_cache, params.cache_scales.v, k, kv_head);
          for (int32_t d = 0; d < head_dim; ++d) acc[static_cast<size_t>(d)] += p * vr[d];
        }
        float* oh = out + (token * num_heads + h) * head_dim;
        for (int32_t d = 0; d < head_dim; ++d) oh[d] = static_cast<float>(acc[static_cast<size_t>(d)] / denom);
      }
    }
  }
}

}  // namespace deepinfer::kernels::ref
