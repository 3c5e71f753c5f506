// The attention front end folded into the tensor-core decode kernel (Backend::attention_with_front_end
// on CUDA) against the two launches it replaces (the front-end kernel, then paged attention): the
// same output and the same cache bits, over head sizes, GQA groups, qk-norm, partial and interleaved
// rotary, page sizes, windows, sinks, skipped cache writes, bf16 and fp8 caches, one sequence to many (the lean twin
// and the wide grid), and the batch-invariant mode and rows sharing one sequence (which keep the two launches).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "attention_cases.h"
#include "cuda_test_util.h"

namespace deepinfer::testing {
namespace {

struct FoldCase {
  AttentionCase attention;
  int32_t rotary_dim = 0;  // 0: head_dim
  bool qk_norm = false;
  kernels::RopeLayout layout = kernels::RopeLayout::kRotateHalf;
  int32_t skipped_seq = -1;  // this sequence's token has slot -1 (a graph's padding row)
  // The sequences are consecutive rows of one sequence over its table (a speculative verify step
  // split into one-token sequences, kernels::PagedBatch::rows_share_sequences).
  bool one_sequence = false;
};

// The step's inputs on the host: one [q | k | v] row per token, its position and slot.
struct FoldInputs {
  HostBatch batch;
  std::vector<float> qkv;
  std::vector<int32_t> positions, slots;
  std::vector<float> inv_freq;
  HostWeight q_norm, k_norm;
};

FoldInputs make_inputs(const FoldCase& c, std::mt19937& rng) {
  const AttentionCase& a = c.attention;
  FoldInputs in;
  in.batch = make_batch(a, rng);
  if (c.one_sequence) {
    const auto width = static_cast<ptrdiff_t>(in.batch.max_blocks_per_seq);
    std::vector<int32_t>& table = in.batch.block_table;
    for (size_t s = 0; s + 1 < a.seqs.size(); ++s) {
      std::copy(table.end() - width, table.end(), table.begin() + static_cast<ptrdiff_t>(s) * width);
    }
  }
  const int64_t row = int64_t{a.num_heads + 2 * a.num_kv_heads} * a.head_dim;
  in.qkv = random_floats(rng, static_cast<size_t>(in.batch.num_tokens * row), -2.0f, 2.0f);
  for (size_t s = 0; s < a.seqs.size(); ++s) {
    const int32_t position = a.seqs[s].seq_len - 1;
    const int32_t block = in.batch.block_table[s * static_cast<size_t>(in.batch.max_blocks_per_seq) +
                                               static_cast<size_t>(position / a.block_size)];
    in.positions.push_back(position);
    in.slots.push_back(static_cast<int32_t>(s) == c.skipped_seq ? -1 : block * a.block_size + position % a.block_size);
  }
  const int32_t rotary = c.rotary_dim > 0 ? c.rotary_dim : a.head_dim;
  for (int32_t i = 0; i < rotary / 2; ++i) {
    in.inv_freq.push_back(static_cast<float>(1.0 / std::pow(500000.0, 2.0 * i / rotary)));
  }
  in.q_norm = make_weight(random_floats(rng, static_cast<size_t>(a.head_dim), 0.5f, 1.5f), DType::kBF16, 1, a.head_dim);
  in.k_norm = make_weight(random_floats(rng, static_cast<size_t>(a.head_dim), 0.5f, 1.5f), DType::kBF16, 1, a.head_dim);
  return in;
}

struct FoldResult {
  std::vector<uint32_t> out;  // float bits
  std::vector<uint8_t> k_cache, v_cache;
  bool q_out_written = false;
};

// A cache's bytes (bf16 values or fp8 codes) with the new tokens' rows as NaN: a read before the
// write would show.
std::vector<uint8_t> cache_bytes(const AttentionCase& a, const std::vector<float>& values,
                                 const std::vector<uint8_t>& codes, const std::vector<int32_t>& slots) {
  const bool fp8 = a.cache_dtype == DType::kF8E4M3;
  std::vector<uint8_t> bytes = codes;
  if (!fp8) {
    const std::vector<uint16_t> bits = to_bf16_bits(values);
    bytes.resize(bits.size() * sizeof(uint16_t));
    std::memcpy(bytes.data(), bits.data(), bytes.size());
  }
  const size_t row = static_cast<size_t>(a.num_kv_heads) * static_cast<size_t>(a.head_dim) * (fp8 ? 1 : 2);
  for (int32_t slot : slots) {
    if (slot < 0) continue;
    for (size_t i = 0; i < row; ++i) {
      bytes[static_cast<size_t>(slot) * row + i] = fp8 ? uint8_t{0x7f} : (i % 2 == 0 ? uint8_t{0xc0} : uint8_t{0x7f});
    }
  }
  return bytes;
}

FoldResult run(Backend& backend, const FoldCase& c, const FoldInputs& in, bool fold) {
  const AttentionCase& a = c.attention;
  const HostBatch& b = in.batch;
  DeviceTables tables = upload_tables(backend, a, b);
  tables.batch.rows_share_sequences = c.one_sequence;
  const std::vector<uint8_t> k_bytes = cache_bytes(a, b.k_cache, b.k_codes, in.slots);
  const std::vector<uint8_t> v_bytes = cache_bytes(a, b.v_cache, b.v_codes, in.slots);
  const int64_t kv_dim = int64_t{a.num_kv_heads} * a.head_dim;
  DeviceBuffer k_cache = upload(backend, k_bytes);
  DeviceBuffer v_cache = upload(backend, v_bytes);
  DeviceBuffer qkv = upload(backend, in.qkv);
  const size_t q_count = static_cast<size_t>(b.num_tokens) * a.num_heads * a.head_dim;
  DeviceBuffer q_out = upload(backend, std::vector<float>(q_count, std::numeric_limits<float>::quiet_NaN()));
  DeviceBuffer out = upload(backend, std::vector<float>(q_count, std::numeric_limits<float>::quiet_NaN()));
  DeviceBuffer positions = upload(backend, in.positions);
  DeviceBuffer slots = upload(backend, in.slots);
  DeviceBuffer inv_freq = upload(backend, in.inv_freq);


  const int64_t row = int64_t{a.num_heads} * a.head_dim + 2 * kv_dim;
  kernels::AttentionFrontEnd f;
  f.q = qkv.as<float>();
  f.k = f.q + int64_t{a.num_heads} * a.head_dim;
  f.v = f.k + kv_dim;
  f.q_stride = f.k_stride = f.v_stride = row;
  f.q_out = q_out.as<float>();
  f.num_tokens = b.num_tokens;
  f.num_heads = a.num_heads;
  f.num_kv_heads = a.num_kv_heads;
  f.head_dim = a.head_dim;
  if (c.qk_norm) {
    f.q_norm = load(backend, in.q_norm, "q_norm");
    f.k_norm = load(backend, in.k_norm, "k_norm");
    f.norm_weight_offset = 0.25f;
    f.norm_eps = 1e-6f;
  }
  f.positions = positions.as<int32_t>();
  f.rotary_dim = c.rotary_dim > 0 ? c.rotary_dim : a.head_dim;
  f.inv_freq = inv_freq.as<float>();
  f.attention_scaling = 1.25f;
  f.layout = c.layout;
  f.slot_mapping = slots.as<int32_t>();
  f.cache_dtype = a.cache_dtype;
  f.cache_scales = tables.params.cache_scales;
  f.k_cache = k_cache.data();
  f.v_cache = v_cache.data();
  if (fold) {
    backend.attention_with_front_end(f, tables.batch, tables.params, out.as<float>());
  } else {
    backend.Backend::attention_with_front_end(f, tables.batch, tables.params, out.as<float>());
  }

  FoldResult result;
  result.out = download<uint32_t>(backend, out, q_count);
  result.k_cache = download<uint8_t>(backend, k_cache, k_bytes.size());
  result.v_cache = download<uint8_t>(backend, v_cache, v_bytes.size());
  for (float x : download<float>(backend, q_out, q_count)) result.q_out_written = result.q_out_written || !std::isnan(x);
  return result;
}

std::string describe(const FoldCase& c) {
  return describe(c.attention) + " rotary " + std::to_string(c.rotary_dim) + (c.qk_norm ? " qk-norm" : "") +
         (c.layout == kernels::RopeLayout::kInterleaved ? " interleaved" : "") +
         (c.skipped_seq >= 0 ? " skipped seq " + std::to_string(c.skipped_seq) : "") +
         (c.one_sequence ? " one sequence" : "");
}

void expect_same_bits(Backend& backend, const FoldCase& c, std::mt19937& rng, bool folds) {
  const FoldInputs in = make_inputs(c, rng);
  const FoldResult want = run(backend, c, in, false);
  const FoldResult got = run(backend, c, in, true);
  const std::string what = describe(c);
  ASSERT_TRUE(want.q_out_written) << what;
  // The folded kernel keeps the rotated q in shared memory: q_out untouched shows it ran.
  EXPECT_EQ(got.q_out_written, !folds) << what;
  size_t out_misses = 0;
  for (size_t i = 0; i < want.out.size(); ++i) out_misses += got.out[i] != want.out[i] ? 1 : 0;
  EXPECT_EQ(out_misses, 0u) << what << ": output elements with other bits, of " << want.out.size();
  EXPECT_EQ(got.k_cache, want.k_cache) << what << " k cache";
  EXPECT_EQ(got.v_cache, want.v_cache) << what << " v cache";
}

std::vector<SeqSpec> decode_seqs(std::initializer_list<int32_t> lengths) {
  std::vector<SeqSpec> seqs;
  for (int32_t length : lengths) seqs.push_back({length, 1});
  return seqs;
}

TEST(CudaAttentionFrontFold, SameBitsAsTheTwoLaunches) {
  auto backend = cuda_backend();
  std::mt19937 rng(61);
  int index = 0;
  for (int32_t head_dim : {64, 128, 256}) {
    for (int32_t group : {1, 3, 8}) {
      for (int32_t block_size : {16, 5}) {
        FoldCase c;
        c.attention = gqa_case(decode_seqs({1, 16, 17, 300, 2049}), block_size, group, head_dim,
                               index % 3 == 1 ? 64 : 0, index % 4 == 2);
        c.attention.cache_dtype = DType::kBF16;
        c.qk_norm = index % 2 == 1;
        if (index % 5 == 3) {
          c.rotary_dim = head_dim / 2;
          c.layout = kernels::RopeLayout::kInterleaved;
        }
        c.skipped_seq = index % 3 == 2 ? 1 : -1;
        expect_same_bits(*backend, c, rng, true);
        ++index;
      }
    }
  }
  // Llama-3-8B's shape at batch 1 (clusters of 8 splits on the lean twin) and batch 16, and 96
  // sequences (a grid wider than the GPU: the other twin).
  for (const std::vector<SeqSpec>& seqs :
       {decode_seqs({1024}), decode_seqs({1024, 963, 902, 841, 780, 719, 658, 597, 536, 475, 414, 353, 292, 231, 170,
                                          109}),
        std::vector<SeqSpec>(96, SeqSpec{200, 1})}) {
    FoldCase llama;
    llama.attention.seqs = seqs;
    llama.attention.num_heads = 32;
    llama.attention.num_kv_heads = 8;
    llama.attention.head_dim = 128;
    llama.attention.cache_dtype = DType::kBF16;
    expect_same_bits(*backend, llama, rng, true);
  }
  // fp8 caches (their column scales in the writes and the products): every head size, GQA 1 to 8,
  // windows, sinks, a skipped write, and Llama-3-8B's shape at batch 16.
  index = 0;
  for (int32_t head_dim : {64, 128, 256}) {
    for (int32_t group : {1, 4, 8}) {
      FoldCase c;
      c.attention = gqa_case(decode_seqs({1, 16, 17, 300, 2049}), index % 2 == 0 ? 16 : 5, group, head_dim,
                             index % 3 == 1 ? 64 : 0, index % 4 == 2);
      c.attention.cache_dtype = DType::kF8E4M3;
      c.qk_norm = index % 2 == 1;
      c.skipped_seq = index % 3 == 2 ? 1 : -1;
      expect_same_bits(*backend, c, rng, true);
      ++index;
    }
  }
  FoldCase llama_fp8;
  llama_fp8.attention.seqs =
      decode_seqs({1024, 963, 902, 841, 780, 719, 658, 597, 536, 475, 414, 353, 292, 231, 170, 109});
  llama_fp8.attention.num_heads = 32;
  llama_fp8.attention.num_kv_heads = 8;
  llama_fp8.attention.head_dim = 128;
  llama_fp8.attention.cache_dtype = DType::kF8E4M3;
  expect_same_bits(*backend, llama_fp8, rng, true);
}

// The batch-invariant mode's fixed splits are not the folded kernel's plan: the two launches run,
// with the same results as the base path.
TEST(CudaAttentionFrontFold, InvariantModeKeepsTheTwoLaunches) {
  auto backend = cuda_backend(true);
  std::mt19937 rng(67);
  FoldCase c;
  c.attention = gqa_case(decode_seqs({33, 700}), 16, 4, 128, 0, false);
  c.attention.cache_dtype = DType::kBF16;
  c.qk_norm = true;
  expect_same_bits(*backend, c, rng, false);
}

// A verify step's rows of one sequence as one-token sequences: each row reads the rows before it,
// which other blocks of a folded launch would write unordered, so the front end runs first.
TEST(CudaAttentionFrontFold, RowsOfOneSequenceKeepTheTwoLaunches) {
  auto backend = cuda_backend();
  std::mt19937 rng(71);
  for (int32_t block_size : {16, 5}) {
    for (int32_t first : {1, 300}) {
      FoldCase c;
      c.attention = gqa_case(decode_seqs({first, first + 1, first + 2, first + 3}), block_size, 4, 128, 0, false);
      c.attention.cache_dtype = DType::kBF16;
      c.one_sequence = true;
      expect_same_bits(*backend, c, rng, false);
    }
  }
}

}  // namespace
}  // namespace deepinfer::testing
