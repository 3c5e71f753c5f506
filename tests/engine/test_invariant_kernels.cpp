// The batch-invariant kernel contract, op by op: a row's (token's) result is the same bits
// however many rows share the call, where the row sits, how the rows are split into calls, and
// how many threads run; attention gives a token the same bits whether its sequence's prompt ran
// whole, in chunks or one token at a time, and whatever other sequences share the batch.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "core/dtype.h"
#include "engine_test_util.h"
#include "kernels/cpu/matmul_invariant.h"
#include "kernels/ops.h"

namespace deepinfer::testing {
namespace {

std::vector<float> random_floats(size_t count, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> values(count);
  for (float& v : values) v = dist(rng);
  return values;
}

bool same_bits(const float* a, const float* b, size_t count) { return std::memcmp(a, b, count * sizeof(float)) == 0; }

// A weight [rows, cols] in dtype, and the exact float values it holds.
struct Weight {
  Weight(DType dtype, int64_t rows, int64_t cols, uint32_t seed) : dtype(dtype), rows(rows), cols(cols) {
    values = random_floats(static_cast<size_t>(rows * cols), seed);
    if (dtype == DType::kF32) return;
    bits.resize(values.size());
    for (size_t i = 0; i < values.size(); ++i) {
      bits[i] = dtype == DType::kBF16 ? f32_to_bf16(values[i]) : f32_to_f16(values[i]);
      values[i] = dtype == DType::kBF16 ? bf16_to_f32(bits[i]) : f16_to_f32(bits[i]);
    }
  }
  kernels::WeightView view() const {
    return {dtype == DType::kF32 ? static_cast<const void*>(values.data()) : bits.data(), dtype, rows, cols};
  }
  DType dtype;
  int64_t rows;
  int64_t cols;
  std::vector<float> values;
  std::vector<uint16_t> bits;
};

class MatmulInvariant : public ::testing::TestWithParam<std::tuple<DType, int64_t>> {};

TEST_P(MatmulInvariant, RowsDoNotDependOnTheBatchOrThreads) {
  const auto [dtype, k_in] = GetParam();
  constexpr int64_t kOut = 67;
  constexpr int64_t kRows = 70;  // more than one row block for every K here
  const Weight w(dtype, kOut, k_in, 1);
  const Weight bias(DType::kF32, 1, kOut, 2);
  const std::vector<float> x = random_floats(static_cast<size_t>(kRows * k_in), 3);
  std::vector<float> whole(static_cast<size_t>(kRows * kOut));
  {
    ScopedThreads two(2);
    kernels::cpu::matmul_invariant(x.data(), w.view(), bias.view(), kRows, whole.data());
  }
  // The oracle: float64 sums of the same products; fp32 accumulation of K terms stays within
  // K * eps(fp32) of their absolute sum.
  for (int64_t m = 0; m < kRows; ++m) {
    for (int64_t n = 0; n < kOut; ++n) {
      double sum = bias.values[static_cast<size_t>(n)];
      double magnitude = std::abs(sum);
      for (int64_t k = 0; k < k_in; ++k) {
        const double product =
            static_cast<double>(x[static_cast<size_t>(m * k_in + k)]) * w.values[static_cast<size_t>(n * k_in + k)];
        sum += product;
        magnitude += std::abs(product);
      }
      const double tolerance = static_cast<double>(k_in + 1) * 0x1p-24 * magnitude;
      ASSERT_NEAR(whole[static_cast<size_t>(m * kOut + n)], sum, tolerance) << "row " << m << " col " << n;
    }
  }
  // The same rows, cut into calls of random sizes, on one thread.
  ScopedThreads one(1);
  std::mt19937 rng(4);
  std::vector<float> pieces(whole.size());
  for (int64_t m = 0; m < kRows;) {
    const int64_t rows = std::min<int64_t>(kRows - m, std::uniform_int_distribution<int64_t>(1, 9)(rng));
    kernels::cpu::matmul_invariant(x.data() + m * k_in, w.view(), bias.view(), rows, pieces.data() + m * kOut);
    m += rows;
  }
  EXPECT_TRUE(same_bits(whole.data(), pieces.data(), whole.size()));
  // One row alone, copied to a different alignment.
  std::vector<float> shifted(static_cast<size_t>(k_in + 3));
  std::copy(x.begin() + 41 * k_in, x.begin() + 42 * k_in, shifted.begin() + 3);
  std::vector<float> alone(static_cast<size_t>(kOut));
  kernels::cpu::matmul_invariant(shifted.data() + 3, w.view(), bias.view(), 1, alone.data());
  EXPECT_TRUE(same_bits(whole.data() + 41 * kOut, alone.data(), static_cast<size_t>(kOut)));
}

INSTANTIATE_TEST_SUITE_P(Shapes, MatmulInvariant,
                         ::testing::Combine(::testing::Values(DType::kF32, DType::kBF16, DType::kF16),
                                            ::testing::Values(int64_t{64}, int64_t{131}, int64_t{1024},
                                                              int64_t{3000})));

// The row-wise ops the model runs besides matmul and attention, at odd widths (unaligned rows).
TEST(RowOpsInvariant, NormAndActivationsDoNotDependOnTheBatch) {
  for (int64_t dim : {24, 64, 131}) {
    constexpr int64_t kRows = 37;
    const std::vector<float> x = random_floats(static_cast<size_t>(kRows * dim), 5);
    const std::vector<float> y = random_floats(static_cast<size_t>(kRows * dim), 6);
    const Weight norm(DType::kF32, 1, dim, 7);
    std::vector<float> normed(x.size());
    std::vector<float> gated(x.size());
    {
      ScopedThreads two(2);
      kernels::cpu::rms_norm(x.data(), norm.view(), 0.0f, kRows, dim, 1e-6f, normed.data());
      kernels::cpu::silu_mul(x.data(), y.data(), kRows * dim, gated.data());
    }
    ScopedThreads one(1);
    for (int64_t r = 0; r < kRows; r += 5) {
      std::vector<float> row(x.begin() + r * dim, x.begin() + (r + 1) * dim);
      std::vector<float> up(y.begin() + r * dim, y.begin() + (r + 1) * dim);
      std::vector<float> out(static_cast<size_t>(dim));
      kernels::cpu::rms_norm(row.data(), norm.view(), 0.0f, 1, dim, 1e-6f, out.data());
      EXPECT_TRUE(same_bits(out.data(), normed.data() + r * dim, static_cast<size_t>(dim))) << "rms_norm row " << r;
      kernels::cpu::silu_mul(row.data(), up.data(), dim, out.data());
      EXPECT_TRUE(same_bits(out.data(), gated.data() + r * dim, static_cast<size_t>(dim))) << "silu_mul row " << r;
    }
  }
}

// One sequence of kLength tokens in a paged cache with scattered blocks, and two others.
class AttentionInvariant : public ::testing::TestWithParam<std::tuple<int32_t, int32_t>> {
 protected:
  static constexpr int32_t kLength = 45;
  static constexpr int32_t kBlockSize = 16;
  static constexpr int32_t kOtherLength = 30;

  void SetUp() override {
    params_.num_heads = 4;
    params_.num_kv_heads = 2;
    params_.head_dim = std::get<0>(GetParam());
    params_.sliding_window = std::get<1>(GetParam());
    params_.scale = 1.0f / std::sqrt(static_cast<float>(params_.head_dim));
    kv_dim_ = params_.num_kv_heads * params_.head_dim;
    q_dim_ = params_.num_heads * params_.head_dim;
    const size_t cache_floats = static_cast<size_t>(kNumBlocks) * kBlockSize * static_cast<size_t>(kv_dim_);
    k_cache_ = random_floats(cache_floats, 11);
    v_cache_ = random_floats(cache_floats, 12);
    q_ = random_floats(static_cast<size_t>(kLength * q_dim_), 13);
    other_q_ = random_floats(static_cast<size_t>(kOtherLength * q_dim_), 14);
  }

  // Runs sequences given as (block table, seq_len, first new position, q rows); returns out.
  struct Seq {
    const std::vector<int32_t>* blocks;
    int32_t seq_len;
    int32_t first_new;
    const float* q;
  };
  std::vector<float> attend(const std::vector<Seq>& seqs) const {
    std::vector<int32_t> query_start{0};
    std::vector<int32_t> seq_len;
    std::vector<int32_t> table;
    std::vector<float> q;
    for (const Seq& s : seqs) {
      const int32_t num_new = s.seq_len - s.first_new;
      query_start.push_back(query_start.back() + num_new);
      seq_len.push_back(s.seq_len);
      for (int32_t b = 0; b < kMaxBlocks; ++b) {
        table.push_back(b < static_cast<int32_t>(s.blocks->size()) ? (*s.blocks)[static_cast<size_t>(b)] : 0);
      }
      q.insert(q.end(), s.q + static_cast<ptrdiff_t>(s.first_new) * q_dim_,
               s.q + static_cast<ptrdiff_t>(s.seq_len) * q_dim_);
    }
    kernels::PagedBatch batch;
    batch.num_seqs = static_cast<int32_t>(seqs.size());
    batch.query_start = query_start.data();
    batch.seq_len = seq_len.data();
    batch.block_table = table.data();
    batch.max_blocks_per_seq = kMaxBlocks;
    batch.block_size = kBlockSize;
    std::vector<float> out(q.size());
    kernels::cpu::paged_attention(q.data(), k_cache_.data(), v_cache_.data(), batch, params_, out.data());
    return out;
  }

  static constexpr int32_t kNumBlocks = 12;
  static constexpr int32_t kMaxBlocks = 4;
  const std::vector<int32_t> blocks_{7, 2, 10, 4};  // kLength tokens
  const std::vector<int32_t> other_blocks_{5, 0};   // kOtherLength tokens
  kernels::AttentionParams params_;
  int32_t kv_dim_ = 0;
  int32_t q_dim_ = 0;
  std::vector<float> k_cache_;
  std::vector<float> v_cache_;
  std::vector<float> q_;
  std::vector<float> other_q_;
};

TEST_P(AttentionInvariant, TokensDoNotDependOnChunkingOrTheBatch) {
  std::vector<float> whole;
  {
    ScopedThreads two(2);
    whole = attend({{&blocks_, kLength, 0, q_.data()}});
  }
  const auto token = [&](const std::vector<float>& out, int32_t row) {
    return out.data() + static_cast<ptrdiff_t>(row) * q_dim_;
  };
  ScopedThreads one(1);
  // Two chunks (13 + 32 tokens), the second next to another sequence's prefill and a decode.
  const std::vector<float> first = attend({{&blocks_, 13, 0, q_.data()}});
  EXPECT_TRUE(same_bits(first.data(), whole.data(), first.size()));
  const std::vector<float> mixed = attend({{&other_blocks_, kOtherLength, 0, other_q_.data()},
                                           {&blocks_, kLength, 13, q_.data()},
                                           {&other_blocks_, kOtherLength, kOtherLength - 1, other_q_.data()}});
  EXPECT_TRUE(same_bits(token(mixed, kOtherLength), token(whole, 13), static_cast<size_t>((kLength - 13) * q_dim_)));
  // One token per call, as decode steps.
  for (int32_t p = 0; p < kLength; ++p) {
    const std::vector<float> step = attend({{&blocks_, p + 1, p, q_.data()}});
    EXPECT_TRUE(same_bits(step.data(), token(whole, p), static_cast<size_t>(q_dim_))) << "position " << p;
  }
}

// head_dim 16 and 24 (not a multiple of the 16-lane vectors); full and sliding-window attention.
INSTANTIATE_TEST_SUITE_P(Shapes, AttentionInvariant,
                         ::testing::Combine(::testing::Values(16, 24), ::testing::Values(0, 8)));

}  // namespace
}  // namespace deepinfer::testing
