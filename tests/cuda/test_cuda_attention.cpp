// CUDA paged attention against ref::paged_attention: decode and prefill batches of mixed lengths,
// chunked prefill over a cached prefix, page sizes 16/64/128, GQA ratios 1 to 8, head sizes of the
// fixtures and of real models, MLA's absorbed form (576 dims, 16 or 128 heads on one latent head
// whose rows are both keys and values), sliding windows, sinks; the bf16 tensor-core prefill on the same
// shapes; bf16 KV caches (values on the bf16 grid, so the reference sees the same keys) through
// every kernel; and, in batch-invariant mode, a sequence's output bits alone equal its bits inside a batch.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <sstream>

#include "cuda_test_util.h"
#include "kernels/ops.h"

namespace deepinfer::testing {
namespace {

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
  // The caches hold bf16 (AttentionParams::cache_dtype); their values are rounded to the bf16 grid
  // first, so the float32 reference reads exactly the cache's keys and values.
  bool bf16_cache = false;
};

// A batch laid out on the host: shuffled block tables over a cache full of random values (the
// positions past each seq_len hold garbage the kernel must not read).
struct HostBatch {
  std::vector<int32_t> query_start, seq_len, block_table;
  int32_t max_blocks_per_seq = 0;
  int32_t num_tokens = 0;
  int32_t max_query_len = 0;
  std::vector<float> q, k_cache, v_cache, sinks;
};

HostBatch make_batch(const AttentionCase& c, std::mt19937& rng) {
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
  if (c.bf16) {
    for (std::vector<float>* values : {&b.q, &b.k_cache, &b.v_cache}) {
      for (float& x : *values) x = bf16_to_f32(f32_to_bf16(x));
    }
  }
  if (c.bf16_cache) {
    for (std::vector<float>* values : {&b.k_cache, &b.v_cache}) {
      for (float& x : *values) x = bf16_to_f32(f32_to_bf16(x));
    }
  }
  return b;
}

kernels::AttentionParams params_of(const AttentionCase& c) {
  kernels::AttentionParams p;
  p.num_heads = c.num_heads;
  p.num_kv_heads = c.num_kv_heads;
  p.head_dim = c.head_dim;
  p.scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  p.sliding_window = c.window;
  p.allow_bf16 = c.bf16;
  return p;
}

std::vector<uint16_t> to_bf16_bits(const std::vector<float>& values) {
  std::vector<uint16_t> bits(values.size());
  for (size_t i = 0; i < values.size(); ++i) bits[i] = f32_to_bf16(values[i]);
  return bits;
}

std::vector<float> run_reference(const AttentionCase& c, const HostBatch& b) {
  kernels::PagedBatch batch{static_cast<int32_t>(c.seqs.size()), b.query_start.data(), b.seq_len.data(),
                            b.block_table.data(), b.max_blocks_per_seq, c.block_size};
  kernels::AttentionParams p = params_of(c);
  if (c.sinks) p.sinks = b.sinks.data();
  std::vector<float> out(b.q.size());
  kernels::ref::paged_attention(b.q.data(), b.k_cache.data(), b.v_cache.data(), batch, p, out.data());
  return out;
}

// Runs on the device; the output starts as NaN so an unwritten element fails.
std::vector<float> run_device(Backend& backend, const AttentionCase& c, const HostBatch& b) {
  DeviceBuffer query_start = upload(backend, b.query_start);
  DeviceBuffer seq_len = upload(backend, b.seq_len);
  DeviceBuffer block_table = upload(backend, b.block_table);
  DeviceBuffer q = upload(backend, b.q);
  DeviceBuffer k_cache = c.bf16_cache ? upload(backend, to_bf16_bits(b.k_cache)) : upload(backend, b.k_cache);
  DeviceBuffer v_cache = c.bf16_cache ? upload(backend, to_bf16_bits(b.v_cache)) : upload(backend, b.v_cache);
  DeviceBuffer sinks = upload(backend, b.sinks);
  DeviceBuffer out = upload(backend, std::vector<float>(b.q.size(), std::numeric_limits<float>::quiet_NaN()));
  kernels::PagedBatch batch{static_cast<int32_t>(c.seqs.size()), query_start.as<int32_t>(), seq_len.as<int32_t>(),
                            block_table.as<int32_t>(), b.max_blocks_per_seq, c.block_size};
  batch.num_tokens = b.num_tokens;
  batch.max_query_len = b.max_query_len;
  kernels::AttentionParams p = params_of(c);
  if (c.sinks) p.sinks = sinks.as<float>();
  if (c.bf16_cache) p.cache_dtype = DType::kBF16;
  const void* values = c.shared_kv ? k_cache.data() : v_cache.data();
  backend.paged_attention(q.as<float>(), k_cache.data(), values, batch, p, out.as<float>());
  return download<float>(backend, out, b.q.size());
}

std::string describe(const AttentionCase& c) {
  std::ostringstream s;
  s << "block " << c.block_size << " heads " << c.num_heads << "/" << c.num_kv_heads << " dim " << c.head_dim
    << " window " << c.window << (c.sinks ? " sinks" : "") << (c.bf16 ? " bf16" : "")
    << (c.bf16_cache ? " bf16 cache" : "")
    << (c.shared_kv ? " shared kv" : "") << " seqs";
  for (const SeqSpec& q : c.seqs) s << " " << q.num_new << "/" << q.seq_len;
  return s.str();
}

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
        AttentionCase c;
        c.seqs = batches[static_cast<size_t>(index % 4)];
        c.block_size = block_size;
        c.num_kv_heads = group == 8 ? 1 : 2;
        c.num_heads = c.num_kv_heads * group;
        c.head_dim = head_dim;
        c.window = std::array<int32_t, 3>{0, 7, 100}[static_cast<size_t>(index % 3)];
        c.sinks = index % 5 == 4;
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
    c.bf16_cache = true;
    const HostBatch b = make_batch(c, rng);
    expect_close(run_device(*backend, c, b), run_reference(c, b), 2e-5, 1e-4, describe(c));
  }
}

// Decode-only batches on bf16 caches take the tiled decode kernel (keys in shared-memory tiles of
// 4096 / head_dim): page sizes that divide a tile, exceed it, and are odd; GQA 1 to 8; head dims
// 64/128/256; windows and sinks; lengths that end mid-tile and mid-page; one split (the kernel
// writes the output) and many (partials and the combine).
TEST(CudaAttentionBf16Cache, TiledDecodeMatchesReference) {
  auto backend = cuda_backend();
  std::mt19937 rng(47);
  const std::vector<SeqSpec> long_seqs = {{1, 1}, {2, 1}, {31, 1}, {33, 1}, {257, 1}, {1023, 1}, {4097, 1}};
  const std::vector<SeqSpec> short_seqs = {{1, 1}, {9, 1}, {40, 1}, {17, 1}};
  int index = 0;
  for (int32_t block_size : {16, 32, 64, 5}) {
    for (int32_t group : {1, 4, 8}) {
      for (int32_t head_dim : {64, 128, 256}) {
        AttentionCase c;
        c.seqs = index % 4 == 3 ? short_seqs : long_seqs;
        c.block_size = block_size;
        c.num_kv_heads = group == 8 ? 1 : 2;
        c.num_heads = c.num_kv_heads * group;
        c.head_dim = head_dim;
        c.window = std::array<int32_t, 3>{0, 37, 300}[static_cast<size_t>(index % 3)];
        c.sinks = index % 5 == 2;
        c.bf16_cache = true;
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
  llama.bf16_cache = true;
  const HostBatch b = make_batch(llama, rng);
  expect_close(run_device(*backend, llama, b), run_reference(llama, b), 2e-5, 1e-4, describe(llama));
}

// The tensor-core prefill over a bf16 cache: the same bits as over a float32 cache holding the same
// (bf16-grid) values, odd page sizes included.
TEST(CudaAttentionBf16Cache, TensorCorePrefillEqualsFloat32CacheBits) {
  auto backend = cuda_backend();
  std::mt19937 rng(43);
  std::vector<AttentionCase> all = bf16_prefill_cases();
  AttentionCase odd_pages = all.front();
  odd_pages.block_size = 13;
  all.push_back(odd_pages);
  for (AttentionCase c : all) {
    c.bf16_cache = true;
    const HostBatch b = make_batch(c, rng);
    const std::vector<float> got = run_device(*backend, c, b);
    expect_close(got, run_reference(c, b), 1.0 / 256 + 2e-5, 1e-4, describe(c));
    AttentionCase f32_cache = c;
    f32_cache.bf16_cache = false;
    const std::vector<float> gathered = run_device(*backend, f32_cache, b);
    EXPECT_EQ(std::memcmp(got.data(), gathered.data(), got.size() * sizeof(float)), 0) << describe(c);
  }
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
