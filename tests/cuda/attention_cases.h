// The paged-attention test cases of tests/cuda: a batch spec (sequences, heads, pages, window,
// sinks, cache type: float32, bf16 or fp8 with column scales), its host layout over shuffled block tables, and runs of
// it on the device and through ref::paged_attention.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <random>
#include <sstream>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "cuda_test_util.h"
#include "kernels/ops.h"

namespace deepinfer::testing {

struct SeqSpec {
  int32_t seq_len;  // cached tokens after the step
  int32_t num_new;  // the step's new tokens (the last num_new of seq_len)
};

struct AttentionCase {
  std::vector<SeqSpec> seqs;
  int32_t block_size = 16;
  int32_t num_heads = 8;
  int32_t num_kv_heads = 2;
  int32_t head_dim = 64;
  int32_t window = 0;
  bool sinks = false;
  // q, k and v on the bf16 grid and AttentionParams::allow_bf16 set: long prompts then take the
  // tensor-core prefill kernel, whose only rounding left is that of the softmax weights.
  bool bf16 = false;
  bool shared_kv = false;  // one cache for keys and values (MLA)
  // The caches' element type (AttentionParams::cache_dtype). A bf16 or fp8 cache's values are put on
  // its grid first, so the float32 reference reads exactly the cache's keys and values: bf16 rounded;
  // fp8 an e4m3 code times its column's scale (AttentionParams::cache_scales), each scale 8 to 15
  // eighths of a power of two, so that product is exact in bf16 as well.
  DType cache_dtype = DType::kF32;
  // Each sequence with more than 4 new tokens holds an image of up to 37 of them, from its second new
  // token on, whose tokens see each other both ways (PagedBatch::lookahead).
  bool images = false;
};

// A GQA case of `group` query heads per KV head (two KV heads, or one at group 8).
inline AttentionCase gqa_case(std::vector<SeqSpec> seqs, int32_t block_size, int32_t group, int32_t head_dim,
                              int32_t window, bool sinks) {
  AttentionCase c;
  c.seqs = std::move(seqs);
  c.block_size = block_size;
  c.num_kv_heads = group == 8 ? 1 : 2;
  c.num_heads = c.num_kv_heads * group;
  c.head_dim = head_dim;
  c.window = window;
  c.sinks = sinks;
  return c;
}

// A batch laid out on the host: shuffled block tables over a cache full of random values (the
// positions past each seq_len hold garbage the kernel must not read).
struct HostBatch {
  std::vector<int32_t> query_start, seq_len, block_table;
  int32_t max_blocks_per_seq = 0;
  int32_t num_tokens = 0;
  int32_t max_query_len = 0;
  std::vector<float> q, k_cache, v_cache, sinks;
  // An fp8 cache's codes and its per-column scales ([num_kv_heads * head_dim] each).
  std::vector<uint8_t> k_codes, v_codes;
  std::vector<float> k_scales, v_scales;
  std::vector<int32_t> lookahead;  // [num_tokens] when the case has images
};

inline HostBatch make_batch(const AttentionCase& c, std::mt19937& rng) {
  HostBatch b;
  b.query_start.push_back(0);
  for (const SeqSpec& s : c.seqs) {
    b.seq_len.push_back(s.seq_len);
    b.query_start.push_back(b.query_start.back() + s.num_new);
    b.max_blocks_per_seq = std::max(b.max_blocks_per_seq, (s.seq_len + c.block_size - 1) / c.block_size);
    b.max_query_len = std::max(b.max_query_len, s.num_new);
  }
  b.num_tokens = b.query_start.back();
  const auto num_seqs = static_cast<int32_t>(c.seqs.size());
  const int32_t num_blocks = num_seqs * b.max_blocks_per_seq + 3;
  std::vector<int32_t> ids(static_cast<size_t>(num_blocks));
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), rng);
  b.block_table.assign(static_cast<size_t>(num_seqs * b.max_blocks_per_seq), -1);
  size_t next = 0;
  for (int32_t s = 0; s < num_seqs; ++s) {
    const int32_t used = (c.seqs[static_cast<size_t>(s)].seq_len + c.block_size - 1) / c.block_size;
    for (int32_t j = 0; j < used; ++j) b.block_table[static_cast<size_t>(s * b.max_blocks_per_seq + j)] = ids[next++];
  }
  const size_t cache = static_cast<size_t>(num_blocks) * c.block_size * c.num_kv_heads * c.head_dim;
  b.k_cache = random_floats(rng, cache, -2.0f, 2.0f);
  b.v_cache = c.shared_kv ? b.k_cache : random_floats(rng, cache);
  b.q = random_floats(rng, static_cast<size_t>(b.num_tokens) * c.num_heads * c.head_dim, -2.0f, 2.0f);
  if (c.sinks) b.sinks = random_floats(rng, static_cast<size_t>(c.num_heads), -1.0f, 3.0f);
  if (c.images) {
    b.lookahead.assign(static_cast<size_t>(b.num_tokens), 0);
    for (int32_t s = 0; s < num_seqs; ++s) {
      const int32_t num_new = c.seqs[static_cast<size_t>(s)].num_new;
      if (num_new <= 4) continue;
      const int32_t length = std::min(num_new - 1, 37);
      for (int32_t i = 0; i < length; ++i) {
        b.lookahead[static_cast<size_t>(b.query_start[static_cast<size_t>(s)] + 1 + i)] = length - 1 - i;
      }
    }
  }
  if (c.bf16) {
    for (std::vector<float>* values : {&b.q, &b.k_cache, &b.v_cache}) {
      for (float& x : *values) x = bf16_to_f32(f32_to_bf16(x));
    }
  }
  if (c.cache_dtype == DType::kBF16) {
    for (std::vector<float>* values : {&b.k_cache, &b.v_cache}) {
      for (float& x : *values) x = bf16_to_f32(f32_to_bf16(x));
    }
  }
  if (c.cache_dtype == DType::kF8E4M3) {
    const auto columns = static_cast<size_t>(c.num_kv_heads) * static_cast<size_t>(c.head_dim);
    const auto scales = [&] {
      std::vector<float> s(columns);
      for (float& x : s) x = std::ldexp(static_cast<float>(8 + rng() % 8) / 8.0f, -3 - static_cast<int>(rng() % 4));
      return s;
    };
    b.k_scales = scales();
    b.v_scales = c.shared_kv ? b.k_scales : scales();
    for (auto [values, codes, column_scales] :
         {std::tuple{&b.k_cache, &b.k_codes, &b.k_scales}, std::tuple{&b.v_cache, &b.v_codes, &b.v_scales}}) {
      codes->resize(values->size());
      for (size_t i = 0; i < values->size(); ++i) {
        const float scale = (*column_scales)[i % columns];
        (*codes)[i] = f32_to_f8e4m3((*values)[i] / scale);
        (*values)[i] = f8e4m3_to_f32((*codes)[i]) * scale;
      }
    }
  }
  return b;
}

inline kernels::AttentionParams params_of(const AttentionCase& c) {
  kernels::AttentionParams p;
  p.num_heads = c.num_heads;
  p.num_kv_heads = c.num_kv_heads;
  p.head_dim = c.head_dim;
  p.scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  p.sliding_window = c.window;
  p.allow_bf16 = c.bf16;
  return p;
}

inline std::vector<uint16_t> to_bf16_bits(const std::vector<float>& values) {
  std::vector<uint16_t> bits(values.size());
  for (size_t i = 0; i < values.size(); ++i) bits[i] = f32_to_bf16(values[i]);
  return bits;
}

inline std::vector<float> run_reference(const AttentionCase& c, const HostBatch& b) {
  kernels::PagedBatch batch{static_cast<int32_t>(c.seqs.size()), b.query_start.data(), b.seq_len.data(),
                            b.block_table.data(), b.max_blocks_per_seq, c.block_size};
  if (c.images) batch.lookahead = b.lookahead.data();
  kernels::AttentionParams p = params_of(c);
  if (c.sinks) p.sinks = b.sinks.data();
  std::vector<float> out(b.q.size());
  kernels::ref::paged_attention(b.q.data(), b.k_cache.data(), b.v_cache.data(), batch, p, out.data());
  return out;
}

// The batch's tables and sinks on the device, and the PagedBatch and AttentionParams over them.
struct DeviceTables {
  DeviceBuffer query_start, seq_len, block_table, sinks, lookahead, k_scales, v_scales;
  kernels::PagedBatch batch;
  kernels::AttentionParams params;
};

inline DeviceTables upload_tables(Backend& backend, const AttentionCase& c, const HostBatch& b) {
  DeviceTables t{upload(backend, b.query_start),
                 upload(backend, b.seq_len),
                 upload(backend, b.block_table),
                 upload(backend, b.sinks),
                 upload(backend, b.lookahead),
                 upload(backend, b.k_scales),
                 upload(backend, b.v_scales),
                 {},
                 params_of(c)};
  t.batch = kernels::PagedBatch{static_cast<int32_t>(c.seqs.size()), t.query_start.as<int32_t>(),
                                t.seq_len.as<int32_t>(), t.block_table.as<int32_t>(), b.max_blocks_per_seq,
                                c.block_size};
  t.batch.num_tokens = b.num_tokens;
  t.batch.max_query_len = b.max_query_len;
  if (c.images) t.batch.lookahead = t.lookahead.as<int32_t>();
  if (c.sinks) t.params.sinks = t.sinks.as<float>();
  t.params.cache_dtype = c.cache_dtype;
  if (c.cache_dtype == DType::kF8E4M3) t.params.cache_scales = {t.k_scales.as<float>(), t.v_scales.as<float>()};
  return t;
}

// Runs on the device; the output starts as NaN so an unwritten element fails.
inline std::vector<float> run_device(Backend& backend, const AttentionCase& c, const HostBatch& b) {
  const DeviceTables tables = upload_tables(backend, c, b);
  DeviceBuffer q = upload(backend, b.q);
  const auto cache = [&](const std::vector<float>& values, const std::vector<uint8_t>& codes) {
    if (c.cache_dtype == DType::kBF16) return upload(backend, to_bf16_bits(values));
    return c.cache_dtype == DType::kF8E4M3 ? upload(backend, codes) : upload(backend, values);
  };
  DeviceBuffer k_cache = cache(b.k_cache, b.k_codes);
  DeviceBuffer v_cache = cache(b.v_cache, b.v_codes);
  DeviceBuffer out = upload(backend, std::vector<float>(b.q.size(), std::numeric_limits<float>::quiet_NaN()));
  const void* values = c.shared_kv ? k_cache.data() : v_cache.data();
  backend.paged_attention(q.as<float>(), k_cache.data(), values, tables.batch, tables.params, out.as<float>());
  return download<float>(backend, out, b.q.size());
}

inline std::string describe(const AttentionCase& c) {
  std::ostringstream s;
  s << "block " << c.block_size << " heads " << c.num_heads << "/" << c.num_kv_heads << " dim " << c.head_dim
    << " window " << c.window << (c.sinks ? " sinks" : "") << (c.bf16 ? " bf16" : "");
  if (c.cache_dtype != DType::kF32) s << " " << dtype_name(c.cache_dtype) << " cache";
  s << (c.images ? " images" : "") << (c.shared_kv ? " shared kv" : "") << " seqs";
  for (const SeqSpec& q : c.seqs) s << " " << q.num_new << "/" << q.seq_len;
  return s.str();
}

}  // namespace deepinfer::testing
