// CUDA paged attention against ref::paged_attention: decode and prefill batches of mixed lengths,
// chunked prefill over a cached prefix, page sizes 16/64/128, GQA ratios 1 to 8, head sizes of the
// fixtures and of real models, MLA's absorbed form (576 dims, 16 or 128 heads on one latent head
// whose rows are both keys and values), sliding windows, sinks, image tokens' lookahead; the bf16
// tensor-core prefill on the same
// shapes; bf16 and fp8 KV caches (values on their grid, so the reference sees the same keys) through
// every kernel; and, in batch-invariant mode, a sequence's output bits alone equal its bits inside a
// batch, float32 and fp8 caches alike.
#include <gtest/gtest.h>

#include <array>
#include <cstring>
#include <random>

#include "attention_cases.h"
#include "cuda_test_util.h"
#include "kernels/ops.h"

namespace deepinfer::testing {
namespace {

std::vector<AttentionCase> cases() {
  std::vector<AttentionCase> all;
  const std::vector<SeqSpec> decode = {{1, 1}, {17, 1}, {300, 1}, {1000, 1}, {4099, 1}};
  const std::vector<SeqSpec> prefill = {{1, 1}, {5, 5}, {64, 64}, {200, 200}, {500, 37}, {129, 1}};
  for (int32_t block_size : {16, 128}) {
    for (int32_t group : {1, 4, 8}) {
      for (int32_t window : {0, 100}) {
        for (const auto* seqs : {&decode, &prefill}) {
          AttentionCase c;
          c.seqs = *seqs;
          c.block_size = block_size;
          c.num_kv_heads = 2;
          c.num_heads = 2 * group;
          c.head_dim = 128;
          c.window = window;
          all.push_back(c);
        }
      }
    }
  }
  for (int32_t head_dim : {16, 24, 64, 96, 256}) {
    AttentionCase c;
    c.seqs = {{40, 40}, {90, 13}, {700, 1}};
    c.head_dim = head_dim;
    c.window = head_dim == 24 ? 8 : 0;
    all.push_back(c);
  }
  AttentionCase sinks;
  sinks.seqs = {{60, 60}, {333, 1}, {2000, 1}};
  sinks.sinks = true;
  sinks.window = 128;
  all.push_back(sinks);
  // Decode-only batches short enough for one split: the decode kernel writes the output itself.
  AttentionCase one_split = sinks;
  one_split.seqs = {{60, 1}, {33, 1}, {7, 1}};
  one_split.window = 20;
  all.push_back(one_split);
  // The decode kernel pads 2 and 6 heads per KV head to 4 and 8 rows.
  for (int32_t group : {2, 6}) {
    AttentionCase c;
    c.seqs = {{5, 1}, {31, 1}, {3000, 1}, {129, 1}};
    c.num_kv_heads = 2;
    c.num_heads = 2 * group;
    c.head_dim = group == 2 ? 64 : 256;
    c.window = group == 2 ? 50 : 0;
    c.sinks = group == 2;
    all.push_back(c);
  }
  // Head sizes between the instantiations: 192 (qk of DeepSeek's expanded form) and 320.
  for (int32_t head_dim : {192, 320}) {
    AttentionCase c;
    c.seqs = {{40, 40}, {301, 1}, {90, 9}};
    c.num_heads = 8;
    c.num_kv_heads = head_dim == 192 ? 2 : 1;
    c.head_dim = head_dim;
    c.shared_kv = head_dim == 320;
    all.push_back(c);
  }
  // MLA decode and prefill in the absorbed form: 512 + 64 latent dims, DeepSeek-V2-Lite's 16 and
  // V3's 128 heads on one latent head.
  for (int32_t heads : {16, 128}) {
    for (int32_t block_size : {16, 64}) {
      AttentionCase decode_case;
      decode_case.seqs = heads == 16 ? std::vector<SeqSpec>{{1, 1}, {37, 1}, {700, 1}, {2049, 1}}
                                     : std::vector<SeqSpec>{{33, 1}, {1500, 1}};
      decode_case.block_size = block_size;
      decode_case.num_heads = heads;
      decode_case.num_kv_heads = 1;
      decode_case.head_dim = 576;
      decode_case.shared_kv = true;
      all.push_back(decode_case);
      AttentionCase prefill_case = decode_case;
      prefill_case.seqs = heads == 16 ? std::vector<SeqSpec>{{1, 1}, {45, 45}, {130, 17}, {300, 1}}
                                      : std::vector<SeqSpec>{{20, 20}, {90, 7}, {257, 1}};
      all.push_back(prefill_case);
    }
  }
  // Image tokens that see their whole image (Gemma 3), beside decodes and plain prompts: float32,
  // and bf16 long enough for the tensor-core prefill, which steps with lookahead leave for the
  // general kernel.
  for (int32_t window : {0, 16}) {
    for (bool bf16 : {false, true}) {
      AttentionCase c = gqa_case({{90, 90}, {301, 1}, {120, 50}, {7, 3}}, 16, 4, bf16 ? 128 : 72, window, false);
      c.bf16 = bf16;
      c.images = true;
      all.push_back(c);
    }
  }
  AttentionCase separate_values;
  separate_values.seqs = {{50, 50}, {400, 1}};
  separate_values.num_heads = 16;
  separate_values.num_kv_heads = 1;
  separate_values.head_dim = 576;
  separate_values.window = 64;
  all.push_back(separate_values);
  return all;
}

class CudaAttention : public ::testing::TestWithParam<bool> {};

TEST_P(CudaAttention, MatchesReference) {
  auto backend = cuda_backend(/*batch_invariant=*/GetParam());
  std::mt19937 rng(99);
  for (const AttentionCase& c : cases()) {
    const HostBatch b = make_batch(c, rng);
    // Softmax-weighted means of values in [-1, 1]: float32 dot products of head_dim terms and
    // sums over up to 4K keys, a few hundred eps at most.
    expect_close(run_device(*backend, c, b), run_reference(c, b), 2e-5, 1e-4, describe(c));
  }
}

INSTANTIATE_TEST_SUITE_P(Modes, CudaAttention, ::testing::Values(false, true),
                         [](const auto& info) { return info.param ? "BatchInvariant" : "Default"; });

// Batches for the tensor-core prefill: each has a prompt of >= 64 new tokens (so the kernel
// runs) beside single tokens, short prompts and chunks over a cached prefix of up to 300.
std::vector<AttentionCase> bf16_prefill_cases() {
  const std::vector<std::vector<SeqSpec>> batches = {
      {{700, 700}, {38, 1}, {337, 300}}, {{600, 300}, {64, 64}}, {{130, 130}}, {{65, 65}, {301, 1}, {5, 5}}};
  std::vector<AttentionCase> all;
  int index = 0;
  for (int32_t block_size : {16, 128}) {
    for (int32_t group : {1, 4, 8}) {
      for (int32_t head_dim : {64, 128}) {
        AttentionCase c = gqa_case(batches[static_cast<size_t>(index % 4)], block_size, group, head_dim,
                                   std::array<int32_t, 3>{0, 7, 100}[static_cast<size_t>(index % 3)], index % 5 == 4);
        c.bf16 = true;
        all.push_back(c);
        ++index;
      }
    }
  }
  AttentionCase wide;
  wide.seqs = {{200, 200}, {70, 10}};
  wide.num_heads = 8;
  wide.num_kv_heads = 2;
  wide.head_dim = 256;
  wide.sinks = true;
  wide.bf16 = true;
  all.push_back(wide);
  return all;
}

TEST(CudaAttentionBf16, TensorCorePrefillMatchesReference) {
  auto backend = cuda_backend();
  std::mt19937 rng(21);
  for (const AttentionCase& c : bf16_prefill_cases()) {
    const HostBatch b = make_batch(c, rng);
    const std::vector<float> got = run_device(*backend, c, b);
    // With q, k, v exact in bf16, the kernel rounds only the softmax weights p to bf16 (relative
    // error <= 2^-8 each) before p.v, while the denominator sums them in fp32: the output, a
    // weighted mean of v in [-1, 1], moves by at most 2^-8. The float32 slack is the f32 test's.
    expect_close(got, run_reference(c, b), 1.0 / 256 + 2e-5, 1e-4, describe(c));
    // And the tensor-core kernel ran: the float32 kernel's result differs in some bit.
    AttentionCase f32_case = c;
    f32_case.bf16 = false;
    const std::vector<float> f32 = run_device(*backend, f32_case, b);
    EXPECT_NE(std::memcmp(got.data(), f32.data(), got.size() * sizeof(float)), 0) << describe(c);
  }
}

// Batch-invariant mode keeps the float32 kernel (its reduction order is fixed per sequence) even
// where bf16 is allowed: the same bits as without the flag.
TEST(CudaAttentionBf16, BatchInvariantModeKeepsFloat32Kernel) {
  auto backend = cuda_backend(/*batch_invariant=*/true);
  std::mt19937 rng(3);
  const AttentionCase c = bf16_prefill_cases().front();
  const HostBatch b = make_batch(c, rng);
  AttentionCase f32_case = c;
  f32_case.bf16 = false;
  const std::vector<float> got = run_device(*backend, c, b);
  const std::vector<float> f32 = run_device(*backend, f32_case, b);
  EXPECT_EQ(std::memcmp(got.data(), f32.data(), got.size() * sizeof(float)), 0) << describe(c);
}

// bf16 caches through the decode, general and split-combine kernels: every float32-kernel case
// whose heads fit (<= 256 dims, not MLA's latent cache), plus odd page sizes and GQA ratios. The
// keys and values are exact, so the float32 tolerance holds.
TEST(CudaAttentionBf16Cache, MatchesReferenceOnRoundedCache) {
  auto backend = cuda_backend();
  std::mt19937 rng(41);
  std::vector<AttentionCase> all;
  for (const AttentionCase& c : cases()) {
    if (c.head_dim <= 256 && !c.shared_kv) all.push_back(c);
  }
  for (int32_t block_size : {1, 7, 33}) {
    for (int32_t group : {3, 5}) {
      AttentionCase c;
      c.seqs = {{1, 1}, {50, 50}, {230, 9}, {999, 1}, {77, 1}};
      c.block_size = block_size;
      c.num_kv_heads = 2;
      c.num_heads = 2 * group;
      c.head_dim = block_size == 7 ? 64 : 128;
      c.window = block_size == 33 ? 40 : 0;
      all.push_back(c);
    }
  }
  for (AttentionCase c : all) {
    c.cache_dtype = DType::kBF16;
    const HostBatch b = make_batch(c, rng);
    expect_close(run_device(*backend, c, b), run_reference(c, b), 2e-5, 1e-4, describe(c));
  }
}

// The tensor-core prefill over a cache of type `cache` (values on its grid: make_batch) and over a
// `twin` cache holding the same values: the same bits, odd page sizes included. bf16 values are exact
// in float32, and fp8 codes times make_batch's scales exact in bf16, so each gather leaves the same
// bf16 workspace.
void expect_prefill_bits_equal(DType cache, DType twin, uint32_t seed) {
  auto backend = cuda_backend();
  std::mt19937 rng(seed);
  std::vector<AttentionCase> all = bf16_prefill_cases();
  AttentionCase odd_pages = all.front();
  odd_pages.block_size = 13;
  all.push_back(odd_pages);
  for (AttentionCase c : all) {
    c.cache_dtype = cache;
    const HostBatch b = make_batch(c, rng);
    const std::vector<float> got = run_device(*backend, c, b);
    expect_close(got, run_reference(c, b), 1.0 / 256 + 2e-5, 1e-4, describe(c));
    AttentionCase same_values = c;
    same_values.cache_dtype = twin;
    const std::vector<float> twin_got = run_device(*backend, same_values, b);
    EXPECT_EQ(std::memcmp(got.data(), twin_got.data(), got.size() * sizeof(float)), 0) << describe(c);
  }
}

TEST(CudaAttentionBf16Cache, TensorCorePrefillEqualsFloat32CacheBits) {
  expect_prefill_bits_equal(DType::kBF16, DType::kF32, 43);
}

// fp8 caches (codes times per-column scales) through every kernel: the tensor-core decode kernels
// (GQA and MLA's latent rows), the general kernel's 4-wide, 16-byte-wide (MLA prompts) and
// per-element loads, and the split combine, in both modes. The decoded keys and values are exact in
// float32; the GQA decode kernel keeps q and p as f16 pairs, so the float32 tolerance holds.
TEST(CudaAttentionFp8Cache, EveryKernelMatchesReference) {
  std::mt19937 rng(45);
  for (const bool invariant : {false, true}) {
    auto backend = cuda_backend(invariant);
    for (AttentionCase c : cases()) {
      c.cache_dtype = DType::kF8E4M3;
      const HostBatch b = make_batch(c, rng);
      // MLA's latent rows decode on the MLA kernel, whose q and p enter f16 MMAs unsplit: the MLA
      // tests' tolerance (test_cuda_attention_decode.cpp).
      const bool mla_kernel = c.head_dim == 576 && c.shared_kv;
      expect_close(run_device(*backend, c, b), run_reference(c, b), mla_kernel ? 1e-2 : 2e-5, 1e-4,
                   describe(c) + (invariant ? " invariant" : ""));
    }
  }
}

TEST(CudaAttentionFp8Cache, TensorCorePrefillEqualsBf16CacheBits) {
  expect_prefill_bits_equal(DType::kF8E4M3, DType::kBF16, 49);
}

// In invariant mode, each sequence of a mixed batch gets the same bits as when it runs alone.
TEST(CudaAttentionInvariance, SequenceAloneEqualsSequenceInBatch) {
  auto backend = cuda_backend(/*batch_invariant=*/true);
  std::mt19937 rng(5);
  std::vector<AttentionCase> all;
  for (const std::vector<SeqSpec>& seqs : std::vector<std::vector<SeqSpec>>{
           {{3000, 1}, {17, 1}, {700, 1}, {1, 1}, {5000, 1}, {64, 1}, {129, 1}, {2048, 1}},
           {{300, 300}, {17, 17}, {900, 40}, {1, 1}, {2000, 1}, {64, 64}, {128, 5}, {40, 40}}}) {
    AttentionCase c;
    c.seqs = seqs;
    c.num_heads = 32;
    c.num_kv_heads = 8;
    c.head_dim = 128;
    all.push_back(c);
  }
  AttentionCase mla;  // the wide kernel, keys and values from one cache
  mla.seqs = {{700, 1}, {40, 40}, {1300, 1}, {90, 3}};
  mla.num_heads = 16;
  mla.num_kv_heads = 1;
  mla.head_dim = 576;
  mla.shared_kv = true;
  all.push_back(mla);
  // fp8 caches: the fp8 decode kernel and the general kernel's fp8 loads (the MLA case's wide rows).
  for (size_t i = 0, n = all.size(); i < n; ++i) {
    AttentionCase fp8 = all[i];
    fp8.cache_dtype = DType::kF8E4M3;
    all.push_back(fp8);
  }
  for (const AttentionCase& c : all) {
    const std::vector<SeqSpec>& seqs = c.seqs;
    const HostBatch b = make_batch(c, rng);
    const std::vector<float> together = run_device(*backend, c, b);
    for (size_t s = 0; s < seqs.size(); ++s) {
      // The same sequence alone: its own rows of q and block table, the same cache.
      AttentionCase alone_case = c;
      alone_case.seqs = {seqs[s]};
      HostBatch alone = b;
      const int32_t begin = b.query_start[s];
      const int32_t end = b.query_start[s + 1];
      const size_t row = static_cast<size_t>(c.num_heads) * c.head_dim;
      alone.query_start = {0, end - begin};
      alone.seq_len = {seqs[s].seq_len};
      alone.num_tokens = end - begin;
      alone.max_query_len = end - begin;
      alone.block_table.assign(b.block_table.begin() + static_cast<int64_t>(s) * b.max_blocks_per_seq,
                               b.block_table.begin() + static_cast<int64_t>(s + 1) * b.max_blocks_per_seq);
      alone.q.assign(b.q.begin() + static_cast<int64_t>(begin * row), b.q.begin() + static_cast<int64_t>(end * row));
      const std::vector<float> got = run_device(*backend, alone_case, alone);
      EXPECT_EQ(std::memcmp(got.data(), together.data() + begin * row, got.size() * sizeof(float)), 0)
          << "sequence " << s << " (" << seqs[s].num_new << "/" << seqs[s].seq_len << ") alone differs from batched; "
          << describe(c);
    }
  }
}

}  // namespace
}  // namespace deepinfer::testing
