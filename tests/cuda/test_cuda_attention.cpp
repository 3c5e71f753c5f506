// CUDA paged attention against ref::paged_attention: decode and prefill batches of mixed lengths,
// chunked prefill over a cached prefix, page sizes 16 and 128, GQA ratios 1/4/8, head sizes of the
// fixtures and of real models, sliding windows, sinks; and, in batch-invariant mode, a sequence's
// output bits alone equal its bits inside a batch.
#include <gtest/gtest.h>

#include <algorithm>
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
  b.v_cache = random_floats(rng, cache);
  b.q = random_floats(rng, static_cast<size_t>(b.num_tokens) * c.num_heads * c.head_dim, -2.0f, 2.0f);
  if (c.sinks) b.sinks = random_floats(rng, static_cast<size_t>(c.num_heads), -1.0f, 3.0f);
  return b;
}

kernels::AttentionParams params_of(const AttentionCase& c) {
  kernels::AttentionParams p;
  p.num_heads = c.num_heads;
  p.num_kv_heads = c.num_kv_heads;
  p.head_dim = c.head_dim;
  p.scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  p.sliding_window = c.window;
  return p;
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
  DeviceBuffer k_cache = upload(backend, b.k_cache);
  DeviceBuffer v_cache = upload(backend, b.v_cache);
  DeviceBuffer sinks = upload(backend, b.sinks);
  DeviceBuffer out = upload(backend, std::vector<float>(b.q.size(), std::numeric_limits<float>::quiet_NaN()));
  kernels::PagedBatch batch{static_cast<int32_t>(c.seqs.size()), query_start.as<int32_t>(), seq_len.as<int32_t>(),
                            block_table.as<int32_t>(), b.max_blocks_per_seq, c.block_size};
  batch.num_tokens = b.num_tokens;
  batch.max_query_len = b.max_query_len;
  kernels::AttentionParams p = params_of(c);
  if (c.sinks) p.sinks = sinks.as<float>();
  backend.paged_attention(q.as<float>(), k_cache.as<float>(), v_cache.as<float>(), batch, p, out.as<float>());
  return download<float>(backend, out, b.q.size());
}

std::string describe(const AttentionCase& c) {
  std::ostringstream s;
  s << "block " << c.block_size << " heads " << c.num_heads << "/" << c.num_kv_heads << " dim " << c.head_dim
    << " window " << c.window << (c.sinks ? " sinks" : "") << " seqs";
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

// In invariant mode, each sequence of a mixed batch gets the same bits as when it runs alone.
TEST(CudaAttentionInvariance, SequenceAloneEqualsSequenceInBatch) {
  auto backend = cuda_backend(/*batch_invariant=*/true);
  std::mt19937 rng(5);
  for (const std::vector<SeqSpec>& seqs : std::vector<std::vector<SeqSpec>>{
           {{3000, 1}, {17, 1}, {700, 1}, {1, 1}, {5000, 1}, {64, 1}, {129, 1}, {2048, 1}},
           {{300, 300}, {17, 17}, {900, 40}, {1, 1}, {2000, 1}, {64, 64}, {128, 5}, {40, 40}}}) {
    AttentionCase c;
    c.seqs = seqs;
    c.num_heads = 32;
    c.num_kv_heads = 8;
    c.head_dim = 128;
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
          << "sequence " << s << " (" << seqs[s].num_new << "/" << seqs[s].seq_len << ") alone differs from batched";
    }
  }
}

}  // namespace
}  // namespace deepinfer::testing
