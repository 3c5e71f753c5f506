// CudaBackend::mla_expanded_attention (MLA prefill in the expanded form: latent rows expanded per
// head by kv_b, then tensor-core attention with 192-dim q.k and 128-dim values) against the
// expanded form as transformers' DeepseekV2Attention writes it, summed in double: keys
// [W_UK_h c ; rope], values W_UV_h c, causal softmax. Prefixes already cached, several sequences
// over shuffled pages, bf16, float32 and fp8 latent caches; and the batches the backend leaves to the
// absorbed form.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "attention_cases.h"
#include "cuda_test_util.h"

namespace deepinfer::testing {
namespace {

constexpr int32_t kLora = 512;
constexpr int32_t kNope = 128;
constexpr int32_t kRope = 64;
constexpr int32_t kV = 128;
constexpr int32_t kRow = kLora + kRope;
constexpr int32_t kQDim = kNope + kRope;

float to_bf16_grid(double x) { return bf16_to_f32(f32_to_bf16(static_cast<float>(x))); }

struct MlaCase {
  std::vector<SeqSpec> seqs;
  int32_t heads = 3;
  DType cache_dtype = DType::kBF16;
};

// The latent cache as an attention case of one 576-dim "kv head" (values unused), on the bf16 grid
// (a float32 cache too), or fp8 codes times their column scales (exact in bf16 as well).
AttentionCase latent_case(const MlaCase& m) {
  AttentionCase c;
  c.seqs = m.seqs;
  c.num_heads = 1;
  c.num_kv_heads = 1;
  c.head_dim = kRow;
  c.shared_kv = true;
  c.cache_dtype = m.cache_dtype == DType::kF8E4M3 ? DType::kF8E4M3 : DType::kBF16;
  return c;
}

// out[t, h, :] in double over the expanded keys and values, each rounded to bf16 as the device's
// expansion product leaves them.
std::vector<float> expected_output(const MlaCase& m, const HostBatch& b, const std::vector<float>& q,
                                   const std::vector<float>& kv_b, float scale) {
  const int32_t heads = m.heads;
  std::vector<float> out(static_cast<size_t>(b.num_tokens) * heads * kV);
  for (size_t s = 0; s < m.seqs.size(); ++s) {
    const int32_t seq_len = b.seq_len[s];
    std::vector<float> keys(static_cast<size_t>(seq_len) * heads * kQDim);
    std::vector<float> values(static_cast<size_t>(seq_len) * heads * kV);
    for (int32_t p = 0; p < seq_len; ++p) {
      const int32_t block = b.block_table[s * static_cast<size_t>(b.max_blocks_per_seq) + p / 16];
      const float* latent = b.k_cache.data() + (static_cast<int64_t>(block) * 16 + p % 16) * kRow;
      for (int32_t h = 0; h < heads; ++h) {
        for (int32_t i = 0; i < kNope + kV; ++i) {
          const float* w = kv_b.data() + (static_cast<int64_t>(h) * (kNope + kV) + i) * kLora;
          double sum = 0.0;
          for (int32_t c = 0; c < kLora; ++c) sum += double{w[c]} * latent[c];
          if (i < kNope) {
            keys[(static_cast<size_t>(p) * heads + h) * kQDim + i] = to_bf16_grid(sum);
          } else {
            values[(static_cast<size_t>(p) * heads + h) * kV + i - kNope] = to_bf16_grid(sum);
          }
        }
        for (int32_t r = 0; r < kRope; ++r) keys[(static_cast<size_t>(p) * heads + h) * kQDim + kNope + r] = latent[kLora + r];
      }
    }
    const int32_t num_new = m.seqs[s].num_new;
    for (int32_t j = 0; j < num_new; ++j) {
      const int64_t token = b.query_start[s] + j;
      const int32_t pos = seq_len - num_new + j;
      for (int32_t h = 0; h < heads; ++h) {
        const float* qh = q.data() + (token * heads + h) * kQDim;
        std::vector<double> scores(static_cast<size_t>(pos) + 1);
        double max_score = -INFINITY;
        for (int32_t k = 0; k <= pos; ++k) {
          const float* key = keys.data() + (static_cast<size_t>(k) * heads + h) * kQDim;
          double dot = 0.0;
          for (int32_t d = 0; d < kQDim; ++d) dot += double{qh[d]} * key[d];
          scores[static_cast<size_t>(k)] = dot * scale;
          max_score = std::max(max_score, scores[static_cast<size_t>(k)]);
        }
        std::vector<double> acc(kV, 0.0);
        double denom = 0.0;
        for (int32_t k = 0; k <= pos; ++k) {
          const double weight = std::exp(scores[static_cast<size_t>(k)] - max_score);
          denom += weight;
          const float* value = values.data() + (static_cast<size_t>(k) * heads + h) * kV;
          for (int32_t d = 0; d < kV; ++d) acc[static_cast<size_t>(d)] += weight * value[d];
        }
        for (int32_t d = 0; d < kV; ++d) {
          out[(static_cast<size_t>(token) * heads + h) * kV + d] = static_cast<float>(acc[static_cast<size_t>(d)] / denom);
        }
      }
    }
  }
  return out;
}

std::string describe(const MlaCase& m) {
  std::ostringstream s;
  s << "heads " << m.heads << " " << dtype_name(m.cache_dtype) << " cache seqs";
  for (const SeqSpec& q : m.seqs) s << " " << q.num_new << "/" << q.seq_len;
  return s.str();
}

struct DeviceRun {
  bool taken = false;
  std::vector<float> out;
};

DeviceRun run_device(Backend& backend, const MlaCase& m, const HostBatch& b, const std::vector<float>& q,
               const kernels::WeightView& kv_b, float scale) {
  const AttentionCase c = latent_case(m);
  const DeviceTables tables = upload_tables(backend, c, b);
  DeviceBuffer dq = upload(backend, q);
  DeviceBuffer cache = m.cache_dtype == DType::kBF16     ? upload(backend, to_bf16_bits(b.k_cache))
                       : m.cache_dtype == DType::kF8E4M3 ? upload(backend, b.k_codes)
                                                         : upload(backend, b.k_cache);
  const size_t out_floats = static_cast<size_t>(b.num_tokens) * m.heads * kV;
  DeviceBuffer out = upload(backend, std::vector<float>(out_floats, std::numeric_limits<float>::quiet_NaN()));
  const kernels::MlaExpandedAttention a{.q = dq.as<float>(),
                                        .latent_cache = cache.data(),
                                        .cache_dtype = m.cache_dtype,
                                        .cache_scales = tables.params.cache_scales,
                                        .kv_b = kv_b,
                                        .num_heads = m.heads,
                                        .kv_lora_rank = kLora,
                                        .nope = kNope,
                                        .rope = kRope,
                                        .v_dim = kV,
                                        .scale = scale,
                                        .out = out.as<float>()};
  DeviceRun run;
  run.taken = backend.mla_expanded_attention(tables.batch, a);
  if (run.taken) run.out = download<float>(backend, out, out_floats);
  return run;
}

struct Inputs {
  HostBatch batch;
  std::vector<float> q;
  HostWeight kv_b;
};

Inputs make_inputs(const MlaCase& m, std::mt19937& rng) {
  Inputs in{make_batch(latent_case(m), rng), {}, {}};
  in.q = random_floats(rng, static_cast<size_t>(in.batch.num_tokens) * m.heads * kQDim);
  for (float& x : in.q) x = to_bf16_grid(x);
  const auto rows = static_cast<int64_t>(m.heads) * (kNope + kV);
  in.kv_b = make_weight(random_floats(rng, static_cast<size_t>(rows) * kLora, -0.05f, 0.05f), DType::kBF16, rows, kLora);
  return in;
}

TEST(CudaMlaPrefill, ExpandedFormMatchesTransformersForm) {
  std::mt19937 rng(41);
  auto backend = cuda_backend();
  const float scale = 1.0f / std::sqrt(static_cast<float>(kQDim));
  const std::vector<MlaCase> cases = {
      {{{200, 200}}, 3, DType::kBF16},
      {{{333, 100}, {70, 70}, {129, 64}}, 3, DType::kBF16},  // cached prefixes, page-crossing lengths
      {{{333, 100}, {70, 70}}, 3, DType::kF32},
      {{{333, 100}, {70, 70}, {129, 64}}, 3, DType::kF8E4M3},  // codes times their scales, gathered to bf16
      {{{300, 300}}, 16, DType::kBF16},                        // DeepSeek-V2-Lite's head count
  };
  for (const MlaCase& m : cases) {
    const Inputs in = make_inputs(m, rng);
    const kernels::WeightView kv_b = load(*backend, in.kv_b);
    const DeviceRun run = run_device(*backend, m, in.batch, in.q, kv_b, scale);
    ASSERT_TRUE(run.taken) << describe(m);
    // bf16 rounding of the softmax weights and of the fp32-accumulated expansion (one ulp where
    // the sums round differently) stay within a few parts in a thousand of the values.
    expect_close(run.out, expected_output(m, in.batch, in.q, in.kv_b.rounded, scale), 1e-2, 1e-2, describe(m));
  }
}

// Decode-like batches (few new tokens per sequence) keep the absorbed form, as does the
// batch-invariant mode.
TEST(CudaMlaPrefill, DecodeBatchesAndInvariantModeKeepTheAbsorbedForm) {
  std::mt19937 rng(42);
  const float scale = 1.0f / std::sqrt(static_cast<float>(kQDim));
  const MlaCase decode{{{300, 1}, {90, 1}, {64, 1}}, 3, DType::kBF16};
  const MlaCase mixed{{{400, 70}, {300, 1}, {200, 1}, {100, 1}}, 3, DType::kBF16};
  const MlaCase prompt{{{200, 200}}, 3, DType::kBF16};
  auto backend = cuda_backend();
  auto invariant = cuda_backend(true);
  for (const auto& [b, m, want] : std::vector<std::tuple<Backend*, MlaCase, bool>>{
           {backend.get(), decode, false}, {backend.get(), mixed, false}, {invariant.get(), prompt, false},
           {backend.get(), prompt, true}}) {
    const Inputs in = make_inputs(m, rng);
    EXPECT_EQ(run_device(*b, m, in.batch, in.q, load(*b, in.kv_b), scale).taken, want) << describe(m);
  }
}

}  // namespace
}  // namespace deepinfer::testing
