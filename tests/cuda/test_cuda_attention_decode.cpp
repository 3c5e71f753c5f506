// The bf16-cache decode kernels against ref::paged_attention: the tensor-core kernel
// (attention_decode_mma.cu) on every shape it takes, its step and page edges, its splits through the
// workspace (the invariant mode's fixed ones) and within a thread-block cluster (2-16); and MLA's
// latent-head kernels (attention_decode_mla.cu: 16 heads a block; attention_decode_mla_wide.cu: 64).
#include <gtest/gtest.h>

#include <array>
#include <bit>
#include <cstddef>
#include <random>
#include <vector>

#include "attention_cases.h"
#include "cuda_test_util.h"

namespace deepinfer::testing {
namespace {

// Decode-only batches on bf16 caches: page sizes of 5 to 64 keys; GQA 1 to 8; head dims 64/128/256;
// windows and sinks; lengths that end mid-step and mid-page; one split (the kernel writes the
// output) and many (partials and the combine); Llama-3-8B's shape at batch 16 (a cluster's splits).
TEST(CudaAttentionBf16Cache, DecodeMatchesReference) {
  auto backend = cuda_backend();
  std::mt19937 rng(47);
  const std::vector<SeqSpec> long_seqs = {{1, 1}, {2, 1}, {31, 1}, {33, 1}, {257, 1}, {1023, 1}, {4097, 1}};
  const std::vector<SeqSpec> short_seqs = {{1, 1}, {9, 1}, {40, 1}, {17, 1}};
  int index = 0;
  for (int32_t block_size : {16, 32, 64, 5}) {
    for (int32_t group : {1, 4, 8}) {
      for (int32_t head_dim : {64, 128, 256}) {
        AttentionCase c = gqa_case(index % 4 == 3 ? short_seqs : long_seqs, block_size, group, head_dim,
                                   std::array<int32_t, 3>{0, 37, 300}[static_cast<size_t>(index % 3)], index % 5 == 2);
        c.cache_dtype = DType::kBF16;
        const HostBatch b = make_batch(c, rng);
        expect_close(run_device(*backend, c, b), run_reference(c, b), 2e-5, 1e-4, describe(c));
        ++index;
      }
    }
  }
  // Llama-3-8B's shape (32 / 8 heads of 128) at the bench's batch of 16 with ragged lengths.
  AttentionCase llama;
  for (int32_t s = 0; s < 16; ++s) llama.seqs.push_back({1024 - 61 * s, 1});
  llama.num_heads = 32;
  llama.num_kv_heads = 8;
  llama.head_dim = 128;
  llama.cache_dtype = DType::kBF16;
  const HostBatch b = make_batch(llama, rng);
  expect_close(run_device(*backend, llama, b), run_reference(llama, b), 2e-5, 1e-4, describe(llama));
}

// The tensor-core decode kernel's edges (64, 128, 256 dims; warps take 16-key steps in turn): lengths
// around a step and a block's four steps, one token, one page, pages of 1 and 5 keys, GQA 1 to 8
// (rows 8-15 of its MMA hold q's low parts), in both modes: the plan's many splits for a few
// sequences, and the invariant mode's fixed 512-key splits that always combine. Its q and p carry
// ~16 bits (bf16 pairs) against exact bf16 keys and values: the float32 tolerance still holds. Every
// other case reads an fp8 cache (f16 pairs against exact codes, scales folded outside the MMAs).
TEST(CudaAttentionBf16Cache, MmaDecodeEdgesMatchReference) {
  std::mt19937 rng(53);
  const std::vector<SeqSpec> seqs = {{1, 1},  {15, 1}, {16, 1},   {17, 1},  {63, 1},
                                     {64, 1}, {65, 1}, {1000, 1}, {2049, 1}};
  for (const bool invariant : {false, true}) {
    auto backend = cuda_backend(invariant);
    int index = 0;
    for (int32_t block_size : {16, 1, 5, 2560}) {
      for (int32_t group : {1, 3, 8}) {
        for (int32_t head_dim : {64, 128, 256}) {
          AttentionCase c;
          c.seqs = seqs;
          c.block_size = block_size;
          c.num_kv_heads = 2;
          c.num_heads = 2 * group;
          c.head_dim = head_dim;
          c.window = std::array<int32_t, 3>{0, 16, 700}[static_cast<size_t>(index % 3)];
          c.sinks = index / 2 % 4 == 1;  // bf16 and fp8 cases alike
          // Every other case over fp8 codes (f16 MMAs, permuted fragments, folded scales).
          c.cache_dtype = index % 2 == 0 ? DType::kBF16 : DType::kF8E4M3;
          const HostBatch b = make_batch(c, rng);
          expect_close(run_device(*backend, c, b), run_reference(c, b), 2e-5, 1e-4, describe(c));
          ++index;
        }
      }
    }
  }
}

// A CUDA graph's block table: each row padded with zeros to a power-of-two width, wider than any
// sequence needs (the plan then sees more keys than the batch holds).
void pad_block_table(HostBatch& b, int32_t width) {
  std::vector<int32_t> table;
  for (size_t s = 0; s < b.seq_len.size(); ++s) {
    const auto row = b.block_table.begin() + static_cast<std::ptrdiff_t>(s) * b.max_blocks_per_seq;
    table.insert(table.end(), row, row + b.max_blocks_per_seq);
    table.insert(table.end(), static_cast<size_t>(width - b.max_blocks_per_seq), 0);
  }
  b.block_table = std::move(table);
  b.max_blocks_per_seq = width;
}

// Decode rows under a graph's padded block table: splits are runs of each sequence's own keys,
// so every split has keys; each still matches the reference. One sequence of 20000 keys on 2 KV
// heads wants more splits than a cluster holds (too few blocks to cap): balanced splits through
// the workspace and the combine kernel.
TEST(CudaAttentionBf16Cache, MmaDecodeBalancesSplitsUnderPaddedTables) {
  auto backend = cuda_backend();
  std::mt19937 rng(61);
  int index = 0;
  for (int32_t num_seqs : {1, 8, 0}) {
    for (int32_t head_dim : {64, 128}) {
      AttentionCase c;
      for (int32_t s = 0; s < num_seqs; ++s) c.seqs.push_back({std::array<int32_t, 3>{1030, 77, 500}[s % 3], 1});
      c.num_kv_heads = 8;
      if (num_seqs == 0) {
        c.seqs = {{20000, 1}};
        c.num_kv_heads = 2;
      }
      c.num_heads = 4 * c.num_kv_heads;
      c.head_dim = head_dim;
      c.window = index % 2 == 1 ? 600 : 0;
      c.cache_dtype = DType::kBF16;
      HostBatch b = make_batch(c, rng);
      pad_block_table(b, 4 * static_cast<int32_t>(std::bit_ceil(static_cast<uint32_t>(b.max_blocks_per_seq))));
      expect_close(run_device(*backend, c, b), run_reference(c, b), 2e-5, 1e-4, describe(c) + " padded table");
      ++index;
    }
  }
}

// Batches of 8, 40 or 96 (sequence, KV head) pairs get 16 (the cluster cap), about 6, or a few
// splits each on an H200's 132 SMs, which combine within a thread-block cluster instead of through
// the workspace: ragged lengths (empty splits), GQA 1/4/8, windows, sinks, odd pages.
TEST(CudaAttentionBf16Cache, MmaDecodeClusterCombineMatchesReference) {
  auto backend = cuda_backend();
  std::mt19937 rng(59);
  int index = 0;
  for (int32_t num_seqs : {1, 5, 12}) {
    for (int32_t group : {1, 4, 8}) {
      for (int32_t head_dim : {64, 128}) {
        AttentionCase c;
        for (int32_t s = 0; s < num_seqs; ++s) c.seqs.push_back({std::array<int32_t, 4>{3000, 1, 700, 17}[s % 4], 1});
        c.block_size = index % 3 == 2 ? 7 : 16;
        c.num_kv_heads = 8;
        c.num_heads = 8 * group;
        c.head_dim = head_dim;
        c.window = index % 4 == 3 ? 900 : 0;
        c.sinks = index % 5 == 1;
        c.cache_dtype = DType::kBF16;
        const HostBatch b = make_batch(c, rng);
        expect_close(run_device(*backend, c, b), run_reference(c, b), 2e-5, 1e-4, describe(c));
        ++index;
      }
    }
  }
}

// MLA's bf16 latent head (512 + 64 dims, keys = values) with 16, 32 and 128 query heads: lengths
// around its 32-key tiles, one token, pages of 5 to 64 keys, a long context split many ways, a
// graph's padded block table (balanced splits), and a batch mixing prompts (the general kernel)
// with decodes (this one). q and p enter its MMAs rounded to bf16: over scores of this test's size
// (q and keys in [-2, 2], 576 dims) that moves an output, a weighted mean of values in [-2, 2], by
// well under 1e-2; a wrong key, page or dim moves it by ~1. Every other case, and the mixed batch
// again, read an fp8 latent cache (f16 MMAs, 128 heads on this kernel too, not the wgmma one).
TEST(CudaAttentionBf16Cache, MlaDecodeMatchesReference) {
  auto backend = cuda_backend();
  std::mt19937 rng(67);
  constexpr double kTolerance = 1e-2;
  const std::vector<SeqSpec> decode_seqs = {{1, 1}, {31, 1}, {32, 1}, {33, 1}, {700, 1}, {8192, 1}};
  int index = 0;
  for (int32_t heads : {16, 32, 128}) {
    for (int32_t block_size : {16, 64, 5}) {
      AttentionCase c;
      c.seqs = heads == 128 ? std::vector<SeqSpec>{{1, 1}, {95, 1}, {1500, 1}} : decode_seqs;
      c.block_size = block_size;
      c.num_heads = heads;
      c.num_kv_heads = 1;
      c.head_dim = 576;
      c.shared_kv = true;
      c.cache_dtype = index % 2 == 0 ? DType::kBF16 : DType::kF8E4M3;
      HostBatch b = make_batch(c, rng);
      if (index % 3 == 1) {
        pad_block_table(b, 2 * static_cast<int32_t>(std::bit_ceil(static_cast<uint32_t>(b.max_blocks_per_seq))));
      }
      expect_close(run_device(*backend, c, b), run_reference(c, b), kTolerance, 1e-4, describe(c));
      ++index;
    }
  }
  AttentionCase mixed;
  mixed.seqs = {{40, 40}, {300, 1}, {130, 17}, {2049, 1}};
  mixed.num_heads = 16;
  mixed.num_kv_heads = 1;
  mixed.head_dim = 576;
  mixed.shared_kv = true;
  mixed.cache_dtype = DType::kBF16;
  const HostBatch b = make_batch(mixed, rng);
  expect_close(run_device(*backend, mixed, b), run_reference(mixed, b), kTolerance, 1e-4, describe(mixed) + " mixed");
  mixed.cache_dtype = DType::kF8E4M3;
  const HostBatch codes = make_batch(mixed, rng);
  expect_close(run_device(*backend, mixed, codes), run_reference(mixed, codes), kTolerance, 1e-4,
               describe(mixed) + " mixed");
}

// MLA's 64-head wgmma kernel (attention_decode_mla_wide.cu: 64-key tiles, 64 heads a block) with 64,
// 128 and 192 query heads: lengths around its tiles (63, 64, 65, 127, 129), one token, a long
// context split many ways, pages of 1 to 64 keys, graph-padded tables (balanced splits), the
// invariant mode's fixed 512-key splits (partials of runs that start mid-sequence), and a batch of
// 60 sequences whose 120 blocks fill a wave with one split each (the kernel normalises the output).
TEST(CudaAttentionBf16Cache, MlaWideDecodeMatchesReference) {
  std::mt19937 rng(71);
  constexpr double kTolerance = 1e-2;  // q and p rounded to bf16, as MlaDecodeMatchesReference says
  const std::vector<SeqSpec> seqs = {{1, 1}, {63, 1}, {64, 1}, {65, 1}, {127, 1}, {129, 1}, {1000, 1}, {4097, 1}};
  const auto latent_case = [](std::vector<SeqSpec> lengths, int32_t heads, int32_t block_size) {
    AttentionCase c;
    c.seqs = std::move(lengths);
    c.block_size = block_size;
    c.num_heads = heads;
    c.num_kv_heads = 1;
    c.head_dim = 576;
    c.shared_kv = true;
    c.cache_dtype = DType::kBF16;
    return c;
  };
  for (const bool invariant : {false, true}) {
    auto backend = cuda_backend(invariant);
    for (int32_t heads : {64, 128, 192}) {
      // Every page size for 64 and 128 heads; two for 192 heads and for the invariant mode (128 heads).
      if (invariant && heads != 128) continue;
      const std::vector<int32_t> page_sizes =
          invariant || heads == 192 ? std::vector<int32_t>{16, 5} : std::vector<int32_t>{16, 1, 5, 64};
      for (size_t i = 0; i < page_sizes.size(); ++i) {
        const AttentionCase c = latent_case(seqs, heads, page_sizes[i]);
        HostBatch b = make_batch(c, rng);
        const bool padded = i % 2 == 1;
        if (padded) {
          pad_block_table(b, 2 * static_cast<int32_t>(std::bit_ceil(static_cast<uint32_t>(b.max_blocks_per_seq))));
        }
        expect_close(run_device(*backend, c, b), run_reference(c, b), kTolerance, 1e-4,
                     describe(c) + (padded ? " padded table" : "") + (invariant ? " invariant" : ""));
      }
    }
  }
  auto backend = cuda_backend();
  std::vector<SeqSpec> wave;
  for (int32_t s = 0; s < 60; ++s) wave.push_back({std::array<int32_t, 4>{300, 77, 129, 512}[s % 4] - s, 1});
  const AttentionCase c = latent_case(wave, 128, 16);
  const HostBatch b = make_batch(c, rng);
  expect_close(run_device(*backend, c, b), run_reference(c, b), kTolerance, 1e-4, describe(c));
}

}  // namespace
}  // namespace deepinfer::testing
