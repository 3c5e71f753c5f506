// The device grouped experts against a reference built from kernels::ref: the CUDA-core kernel
// (decode-sized batches, F32 weights), the streamed tensor-core tiles (bf16/f16, 4 to 20 rows per
// expert), the WMMA tensor-core one (from 20 rows per expert, and always in batch-invariant mode)
// and the grouped GEMMs of prompt-sized steps (from 64 rows per
// expert: bf16 on the wgmma kernel with biases and both activations, f16 SiLU experts without
// biases on cuBLAS; the batch-invariant twin keeps the tensor-core kernel), odd and aligned shapes,
// biases, both activations, experts that get no tokens, the per-expert counters, and rows that do
// not depend on their batch; routing and experts in one call against the two calls apart; MXFP4
// experts (GPT-OSS) and FP8 ones (DeepSeek-V3) read packed, on the streamed tiles and on the grouped
// GEMMs (FP8 in 128 x 128 blocks on the FP8 kernel from 24 rows per expert; others dequantised).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <set>

#include "cuda_test_util.h"
#include "kernels/ops.h"
#include "kernels/ref/dequantize.h"

namespace deepinfer::testing {
namespace {

constexpr double kEps32 = 1.1920929e-7;
constexpr int32_t kNumExperts = 16;
constexpr int32_t kUsedExperts = 12;  // experts 12..15 are never routed to
constexpr int32_t kTopK = 4;

// Round-to-nearest-even of every value to dtype, back in float32; kF8E4M3: quantised per 128 values
// as the FP8 products quantise a row (fp8_quantized_rows).
std::vector<float> rounded(const std::vector<float>& values, DType dtype) {
  if (dtype == DType::kF32) return values;
  if (dtype == DType::kF8E4M3) return fp8_quantized_rows(values, 1, static_cast<int64_t>(values.size()));
  return make_weight(values, dtype, 1, static_cast<int64_t>(values.size())).rounded;
}

// experts over views (gate, up, down, then the biases, which count when bias): the layer's shape and
// activation, the pointers into views.
kernels::MoeExperts experts_over(const std::vector<kernels::WeightView> (&views)[6], int64_t hidden, int64_t inter,
                                 bool bias, kernels::ExpertActivation activation) {
  kernels::MoeExperts experts;
  experts.num_experts = kNumExperts;
  experts.top_k = kTopK;
  experts.hidden = hidden;
  experts.intermediate = inter;
  experts.activation = activation;
  experts.gate = views[0].data();
  experts.up = views[1].data();
  experts.down = views[2].data();
  if (bias) {
    experts.gate_bias = views[3].data();
    experts.up_bias = views[4].data();
    experts.down_bias = views[5].data();
  }
  return experts;
}

// The host layer's experts (shape, activation and its parameters) over a backend's copies of its views.
kernels::MoeExperts experts_over(const std::vector<kernels::WeightView> (&views)[6], const kernels::MoeExperts& host) {
  kernels::MoeExperts experts =
      experts_over(views, host.hidden, host.intermediate, host.gate_bias != nullptr, host.activation);
  experts.swiglu_alpha = host.swiglu_alpha;
  experts.swiglu_limit = host.swiglu_limit;
  return experts;
}

// A layer of experts on the host (the oracle's views) and on each backend.
struct Layer {
  std::vector<HostWeight> weights[6];  // gate, up, down, gate_bias, up_bias, down_bias
  std::vector<kernels::WeightView> host[6];
  kernels::MoeExperts host_experts;

  Layer(std::mt19937& rng, DType dtype, int64_t hidden, int64_t inter, bool bias,
        kernels::ExpertActivation activation) {
    const int64_t shapes[6][2] = {{inter, hidden}, {inter, hidden}, {hidden, inter}, {1, inter}, {1, inter}, {1, hidden}};
    for (int p = 0; p < (bias ? 6 : 3); ++p) {
      // Weights of scale 1/sqrt(fan-in) keep activations near 1 whatever the shape.
      const float scale = 1.0f / std::sqrt(static_cast<float>(shapes[p][1]));
      for (int32_t e = 0; e < kNumExperts; ++e) {
        weights[p].push_back(make_weight(random_floats(rng, static_cast<size_t>(shapes[p][0] * shapes[p][1]), -scale, scale),
                                         dtype, shapes[p][0], shapes[p][1]));
        host[p].push_back(weights[p].back().view());
      }
    }
    host_experts = experts_over(host, hidden, inter, bias, activation);
  }
};

// The same experts loaded on one backend.
struct DeviceLayer {
  std::vector<kernels::WeightView> views[6];
  kernels::MoeExperts experts;

  DeviceLayer(Backend& backend, const Layer& layer) {
    for (int p = 0; p < 6; ++p) {
      for (const HostWeight& w : layer.weights[p]) views[p].push_back(load(backend, w));
    }
    experts = experts_over(views, layer.host_experts);
  }
};

// ref::moe_experts with the device's roundings: x and the activations rounded to the weight dtype
// before each product; with rounded_outputs (the grouped GEMMs, whose outputs take the weight
// dtype) also gate, up and each expert's down output, biases added first. max_h, max_y: the largest |activation| and
// |down output|, for the tolerance.
std::vector<float> oracle(const std::vector<float>& x, int64_t num_tokens, const std::vector<int32_t>& ids,
                          const std::vector<float>& weights, const kernels::MoeExperts& experts, DType dtype,
                          bool rounded_outputs, double& max_h, double& max_y) {
  const int64_t hidden = experts.hidden;
  const int64_t inter = experts.intermediate;
  std::vector<float> out(static_cast<size_t>(num_tokens * hidden), 0.0f);
  std::vector<float> gate(static_cast<size_t>(inter)), up(gate.size()), down(static_cast<size_t>(hidden));
  const kernels::WeightView none;
  max_h = 0.0;
  max_y = 0.0;
  for (int64_t t = 0; t < num_tokens; ++t) {
    const std::vector<float> xr = rounded(std::vector<float>(x.begin() + t * hidden, x.begin() + (t + 1) * hidden), dtype);
    for (int32_t j = 0; j < kTopK; ++j) {
      const int32_t e = ids[static_cast<size_t>(t * kTopK + j)];
      kernels::ref::matmul(xr.data(), experts.gate[e], experts.gate_bias ? experts.gate_bias[e] : none, 1, gate.data());
      kernels::ref::matmul(xr.data(), experts.up[e], experts.up_bias ? experts.up_bias[e] : none, 1, up.data());
      if (rounded_outputs) {
        gate = rounded(gate, dtype);
        up = rounded(up, dtype);
      }
      for (int64_t i = 0; i < inter; ++i) {
        double g = gate[static_cast<size_t>(i)];
        double u = up[static_cast<size_t>(i)];
        if (experts.activation == kernels::ExpertActivation::kSiluGated) {
          gate[static_cast<size_t>(i)] = static_cast<float>(g / (1.0 + std::exp(-g)) * u);
        } else {
          const double limit = experts.swiglu_limit;
          g = std::min(g, limit);
          u = std::clamp(u, -limit, limit);
          gate[static_cast<size_t>(i)] = static_cast<float>((u + 1.0) * g / (1.0 + std::exp(-experts.swiglu_alpha * g)));
        }
        max_h = std::max(max_h, std::abs(static_cast<double>(gate[static_cast<size_t>(i)])));
      }
      const std::vector<float> hr = rounded(gate, dtype);
      kernels::ref::matmul(hr.data(), experts.down[e], experts.down_bias ? experts.down_bias[e] : none, 1, down.data());
      if (rounded_outputs) down = rounded(down, dtype);
      for (float v : down) max_y = std::max(max_y, std::abs(static_cast<double>(v)));
      const float w = weights[static_cast<size_t>(t * kTopK + j)];
      for (int64_t i = 0; i < hidden; ++i) out[static_cast<size_t>(t * hidden + i)] += w * down[static_cast<size_t>(i)];
    }
  }
  return out;
}

// top_k distinct experts among the first kUsedExperts per token, and positive slot weights.
void random_routing(std::mt19937& rng, int64_t num_tokens, std::vector<int32_t>& ids, std::vector<float>& weights) {
  ids.resize(static_cast<size_t>(num_tokens * kTopK));
  weights = random_floats(rng, ids.size(), 0.05f, 1.0f);
  std::vector<int32_t> order(kUsedExperts);
  for (int64_t t = 0; t < num_tokens; ++t) {
    std::iota(order.begin(), order.end(), 0);
    std::shuffle(order.begin(), order.end(), rng);
    std::copy(order.begin(), order.begin() + kTopK, ids.begin() + t * kTopK);
  }
}

// Runs the experts on backend; counts start at 7 per expert.
std::vector<float> run(Backend& backend, const kernels::MoeExperts& experts, const std::vector<float>& x,
                       int64_t num_tokens, const std::vector<int32_t>& ids, const std::vector<float>& weights,
                       std::vector<int64_t>* counts) {
  DeviceBuffer dx = upload(backend, x);
  DeviceBuffer dids = upload(backend, ids);
  DeviceBuffer dweights = upload(backend, weights);
  DeviceBuffer dworkspace =
      backend.allocate(static_cast<size_t>(kernels::moe_workspace_floats(num_tokens, experts)) * sizeof(float));
  DeviceBuffer dcounts = upload(backend, std::vector<int64_t>(kNumExperts, 7));
  DeviceBuffer dout = backend.allocate(static_cast<size_t>(num_tokens * experts.hidden) * sizeof(float));
  backend.moe_experts(dx.as<float>(), num_tokens, dids.as<int32_t>(), dweights.as<float>(), experts,
                      dworkspace.as<float>(), dcounts.as<int64_t>(), dout.as<float>());
  if (counts != nullptr) *counts = download<int64_t>(backend, dcounts, kNumExperts);
  return download<float>(backend, dout, static_cast<size_t>(num_tokens * experts.hidden));
}

struct Shape {
  int64_t hidden, inter;
  bool bias;
  kernels::ExpertActivation activation;
  int64_t prompt_tokens = 0;  // > 0: one step of this many tokens, 16-bit weights
};

// Float32 accumulation over both products; for 16-bit weights a value whose float32 value
// straddles a rounding boundary may round the other way: an activation (one ulp of the dtype, times
// a down weight of at most 1/sqrt(inter), in a few terms), and with rounded_outputs (the grouped
// GEMMs) a gate, up or down output (one ulp of it, in a few slots). max_h, max_y: oracle's;
// max_down: the largest |down weight| (0: the random layers' 1/sqrt(inter)).
double output_tolerance(const Shape& s, DType dtype, double max_h, double max_y, bool rounded_outputs,
                        double max_down = 0.0) {
  const double ulp = dtype == DType::kBF16 ? 1.0 / 256 : dtype == DType::kF16 ? 1.0 / 2048 : 0.0;
  if (max_down == 0.0) max_down = 1.0 / std::sqrt(static_cast<double>(s.inter));
  return 1e-6 + 8 * kEps32 * static_cast<double>(s.hidden + s.inter) * (1.0 + max_h) + 4 * ulp * max_h * max_down +
         (rounded_outputs ? 4 * ulp * max_y : 0.0);
}

// The per-expert counters after run(): 7 each to start, plus the routed rows.
std::vector<int64_t> expected_counts(const std::vector<int32_t>& ids) {
  std::vector<int64_t> counts(kNumExperts, 7);
  for (int32_t id : ids) ++counts[static_cast<size_t>(id)];
  return counts;
}

TEST(CudaMoeExperts, MatchReference) {
  std::mt19937 rng(77);
  auto backend = cuda_backend();
  auto invariant = cuda_backend(/*batch_invariant=*/true);
  using kernels::ExpertActivation;
  // Odd sizes take the scalar loads; multiples of 8 / 16 the vector ones.
  const Shape shapes[] = {{37, 23, false, ExpertActivation::kSiluGated},
                          {37, 23, true, ExpertActivation::kClampedSwiglu},
                          {64, 48, true, ExpertActivation::kSiluGated},
                          {256, 136, true, ExpertActivation::kClampedSwiglu},
                          {512, 384, false, ExpertActivation::kSiluGated},
                          // 300 tokens = 75 rows per expert: a grouped GEMM (16-bit weights)
                          {256, 128, false, ExpertActivation::kSiluGated},
                          // 200 rows per expert: two row tiles of the wgmma kernel (the second
                          // ragged), two column tiles of gate|up and three of down, k slices past
                          // its 4-stage ring, k % 64 != 0
                          {520, 200, false, ExpertActivation::kSiluGated, 600},
                          {520, 200, true, ExpertActivation::kClampedSwiglu, 600},
                          // 1000 rows per expert: 192 tiles a projection, more than the H200's 132
                          // persistent blocks, so blocks run several tiles and the ring's phases
                          // carry across them (5 and 3 k slices a tile)
                          {264, 136, true, ExpertActivation::kClampedSwiglu, 3000}};
  for (DType dtype : {DType::kF32, DType::kBF16, DType::kF16}) {
    for (const Shape& s : shapes) {
      if (s.prompt_tokens > 0 && dtype == DType::kF32) continue;
      const Layer layer(rng, dtype, s.hidden, s.inter, s.bias, s.activation);
      const DeviceLayer on_backend(*backend, layer);
      const DeviceLayer on_invariant(*invariant, layer);
      for (int64_t num_tokens :
           s.prompt_tokens > 0 ? std::vector<int64_t>{s.prompt_tokens} : std::vector<int64_t>{1, 5, 64, 120, 300}) {
        if (s.prompt_tokens == 0 && s.hidden * s.inter > 100000 && num_tokens > 64) continue;  // keeps the oracle fast
        const auto x = random_floats(rng, static_cast<size_t>(num_tokens * s.hidden));
        std::vector<int32_t> ids;
        std::vector<float> weights;
        random_routing(rng, num_tokens, ids, weights);
        // The default backend runs prompt-sized steps (from 64 rows per expert) of bf16 experts, and
        // of f16 SiLU experts without biases, on grouped GEMMs, which round their outputs too.
        const bool on_grouped_gemm =
            (dtype == DType::kBF16 || (dtype == DType::kF16 && !s.bias && s.activation == ExpertActivation::kSiluGated)) &&
            s.hidden % 8 == 0 && s.inter % 8 == 0 && num_tokens * kTopK >= 64 * kNumExperts;
        double max_h = 0.0;
        double max_y = 0.0;
        const std::vector<float> want =
            oracle(x, num_tokens, ids, weights, layer.host_experts, dtype, false, max_h, max_y);
        const std::vector<float> want_grouped =
            on_grouped_gemm ? oracle(x, num_tokens, ids, weights, layer.host_experts, dtype, true, max_h, max_y) : want;
        const double abs_tol = output_tolerance(s, dtype, max_h, max_y, on_grouped_gemm);
        const std::vector<int64_t> want_counts = expected_counts(ids);
        const std::string what = std::string(dtype_name(dtype)) + " " + std::to_string(s.hidden) + "x" +
                                 std::to_string(s.inter) + (s.bias ? " +bias" : "") + " tokens " +
                                 std::to_string(num_tokens);
        for (Backend* b : {backend.get(), invariant.get()}) {
          const DeviceLayer& device = b == backend.get() ? on_backend : on_invariant;
          std::vector<int64_t> counts;
          const std::vector<float> got = run(*b, device.experts, x, num_tokens, ids, weights, &counts);
          const std::string where = what + (b == invariant.get() ? " (invariant)" : "");
          expect_close(got, b == backend.get() ? want_grouped : want, abs_tol, 1e-5, where);
          EXPECT_EQ(counts, want_counts) << where;
        }
      }
    }
  }
}

// The streamed tensor-core tiles (4 to 20 routed rows per expert on average) with every row on 4 of
// the 16 experts: 64 rows each, so each expert spans two 32-row tiles; a hidden size that is not a
// multiple of 16 leaves a down warp's second 8 columns past the end.
TEST(CudaMoeExperts, StreamedTilesOfSkewedRouting) {
  std::mt19937 rng(91);
  auto backend = cuda_backend();
  using kernels::ExpertActivation;
  const Shape shapes[] = {{512, 384, false, ExpertActivation::kSiluGated},
                          {72, 40, true, ExpertActivation::kClampedSwiglu}};
  constexpr int64_t kTokens = 64;  // 256 rows: 16 per expert on average
  for (DType dtype : {DType::kBF16, DType::kF16}) {
    for (const Shape& s : shapes) {
      const Layer layer(rng, dtype, s.hidden, s.inter, s.bias, s.activation);
      const DeviceLayer device(*backend, layer);
      const auto x = random_floats(rng, static_cast<size_t>(kTokens * s.hidden));
      std::vector<int32_t> ids(static_cast<size_t>(kTokens * kTopK));
      for (int64_t t = 0; t < kTokens; ++t) {
        for (int32_t j = 0; j < kTopK; ++j) {
          ids[static_cast<size_t>(t * kTopK + j)] = 3 + static_cast<int32_t>((t + j) % kTopK);  // experts 3..6
        }
      }
      const std::vector<float> weights = random_floats(rng, ids.size(), 0.05f, 1.0f);
      double max_h = 0.0;
      double max_y = 0.0;
      const std::vector<float> want = oracle(x, kTokens, ids, weights, layer.host_experts, dtype, false, max_h, max_y);
      const double abs_tol = output_tolerance(s, dtype, max_h, max_y, false);
      const std::vector<int64_t> want_counts = expected_counts(ids);
      const std::string what =
          std::string(dtype_name(dtype)) + " " + std::to_string(s.hidden) + "x" + std::to_string(s.inter) + " skewed";
      std::vector<int64_t> counts;
      const std::vector<float> got = run(*backend, device.experts, x, kTokens, ids, weights, &counts);
      expect_close(got, want, abs_tol, 1e-5, what);
      EXPECT_EQ(counts, want_counts) << what;
    }
  }
}

// moe_route_experts (decode sizes: the router's launch groups the rows) against moe_route then
// moe_experts on the same backend: the same ids, weights, counts and outputs, bit for bit.
TEST(CudaMoeExperts, RouteExpertsMatchesRouteThenExperts) {
  std::mt19937 rng(31);
  kernels::MoeRouting routing;
  routing.num_experts = kNumExperts;
  routing.top_k = kTopK;
  routing.normalize = true;
  for (const bool batch_invariant : {false, true}) {
    auto backend = cuda_backend(batch_invariant);
    for (DType dtype : {DType::kF32, DType::kBF16}) {
      const Layer layer(rng, dtype, 256, 136, true, kernels::ExpertActivation::kClampedSwiglu);
      const DeviceLayer device(*backend, layer);
      for (int64_t num_tokens : {1, 2, 5, 64, 300}) {
        const auto rows = static_cast<size_t>(num_tokens * kTopK);
        const size_t out_floats = static_cast<size_t>(num_tokens * 256);
        DeviceBuffer x = upload(*backend, random_floats(rng, out_floats));
        DeviceBuffer logits =
            upload(*backend, random_floats(rng, static_cast<size_t>(num_tokens * kNumExperts), -3, 3));
        const auto workspace_bytes =
            static_cast<size_t>(kernels::moe_workspace_floats(num_tokens, device.experts)) * sizeof(float);
        std::vector<float> outs[2];
        std::vector<int32_t> ids[2];
        std::vector<float> weights[2];
        std::vector<int64_t> counts[2];
        for (int fused = 0; fused < 2; ++fused) {
          DeviceBuffer dids = backend->allocate(rows * sizeof(int32_t));
          DeviceBuffer dweights = backend->allocate(rows * sizeof(float));
          DeviceBuffer dworkspace = backend->allocate(workspace_bytes);
          DeviceBuffer dcounts = upload(*backend, std::vector<int64_t>(kNumExperts, 3));
          DeviceBuffer dout = backend->allocate(out_floats * sizeof(float));
          if (fused == 1) {
            backend->moe_route_experts(logits.as<float>(), kernels::WeightView{}, routing, x.as<float>(), num_tokens,
                                       dids.as<int32_t>(), dweights.as<float>(), device.experts, dworkspace.as<float>(),
                                       dcounts.as<int64_t>(), dout.as<float>());
          } else {
            backend->moe_route(logits.as<float>(), kernels::WeightView{}, num_tokens, routing, dids.as<int32_t>(),
                               dweights.as<float>());
            backend->moe_experts(x.as<float>(), num_tokens, dids.as<int32_t>(), dweights.as<float>(), device.experts,
                                 dworkspace.as<float>(), dcounts.as<int64_t>(), dout.as<float>());
          }
          outs[fused] = download<float>(*backend, dout, out_floats);
          ids[fused] = download<int32_t>(*backend, dids, rows);
          weights[fused] = download<float>(*backend, dweights, rows);
          counts[fused] = download<int64_t>(*backend, dcounts, kNumExperts);
        }
        const std::string what = std::string(dtype_name(dtype)) + " tokens " + std::to_string(num_tokens) +
                                 (batch_invariant ? " (invariant)" : "");
        EXPECT_EQ(ids[1], ids[0]) << what;
        EXPECT_EQ(std::memcmp(weights[1].data(), weights[0].data(), rows * sizeof(float)), 0) << what;
        EXPECT_EQ(counts[1], counts[0]) << what;
        EXPECT_EQ(std::memcmp(outs[1].data(), outs[0].data(), out_floats * sizeof(float)), 0) << what;
      }
    }
  }
}

TEST(CudaMoeExperts, InvariantRowsDoNotDependOnBatch) {
  std::mt19937 rng(5);
  auto invariant = cuda_backend(/*batch_invariant=*/true);
  for (DType dtype : {DType::kBF16, DType::kF32}) {
    const Layer layer(rng, dtype, 256, 136, true, kernels::ExpertActivation::kSiluGated);
    const DeviceLayer device(*invariant, layer);
    const int64_t num_tokens = 300;
    const auto x = random_floats(rng, static_cast<size_t>(num_tokens * 256));
    std::vector<int32_t> ids;
    std::vector<float> weights;
    random_routing(rng, num_tokens, ids, weights);
    const std::vector<float> batch = run(*invariant, device.experts, x, num_tokens, ids, weights, nullptr);
    for (int64_t n : {1, 3, 64}) {
      const std::vector<float> part = run(*invariant, device.experts, x, n, ids, weights, nullptr);
      EXPECT_EQ(std::memcmp(part.data(), batch.data(), part.size() * sizeof(float)), 0)
          << dtype_name(dtype) << ": the first " << n << " tokens differ from the same tokens in a batch of 300";
    }
  }
}

// MXFP4 experts as GPT-OSS publishes them: e2m1 codes, an e8m0 scale per 32 values (2^-8-2^-1,
// one block in 16 at 2^-12, 2^4-2^11 below its row's largest), bf16 biases; high_scales puts down
// row 0 of every expert at 2^23-2^33, where an f16 of code * scale would overflow (past 2^15).
struct Mxfp4Layer {
  static constexpr int kLowScale = 115;
  std::vector<std::vector<uint8_t>> codes[3];
  std::vector<std::vector<uint8_t>> scales[3];
  std::vector<HostWeight> biases[3];
  std::vector<kernels::WeightView> host[6];
  kernels::MoeExperts host_experts;
  double max_down = 0.0;  // the largest |down weight| outside high_scales' rows

  Mxfp4Layer(std::mt19937& rng, int64_t hidden, int64_t inter, bool bias, bool high_scales) {
    const int64_t shapes[3][2] = {{inter, hidden}, {inter, hidden}, {hidden, inter}};
    std::uniform_int_distribution<int> byte(0, 255);
    std::uniform_int_distribution<int> scale(119, 126);
    max_down = 6.0 * std::ldexp(1.0, 126 - 127);
    for (int p = 0; p < 3; ++p) {
      const int64_t rows = shapes[p][0];
      const int64_t cols = shapes[p][1];
      for (int32_t e = 0; e < kNumExperts; ++e) {
        std::vector<uint8_t> c(static_cast<size_t>(rows * cols / 2));
        for (uint8_t& v : c) v = static_cast<uint8_t>(byte(rng));
        std::vector<uint8_t> s(static_cast<size_t>(rows * cols / kernels::kMxfp4Block));
        for (size_t i = 0; i < s.size(); ++i) {
          s[i] = static_cast<uint8_t>(byte(rng) % 16 == 0 ? kLowScale : scale(rng));
          if (high_scales && p == 2 && static_cast<int64_t>(i) < cols / kernels::kMxfp4Block) {
            s[i] = static_cast<uint8_t>(150 + byte(rng) % 11);
          }
        }
        codes[p].push_back(std::move(c));
        scales[p].push_back(std::move(s));
      }
      for (int32_t e = 0; e < kNumExperts; ++e) {
        host[p].push_back(kernels::WeightView{codes[p][static_cast<size_t>(e)].data(), DType::kMxfp4, rows, cols,
                                              scales[p][static_cast<size_t>(e)].data(), 1,
                                              static_cast<int32_t>(kernels::kMxfp4Block)});
      }
      if (!bias) continue;
      for (int32_t e = 0; e < kNumExperts; ++e) {
        biases[p].push_back(
            make_weight(random_floats(rng, static_cast<size_t>(rows), -0.5f, 0.5f), DType::kBF16, 1, rows));
      }
      for (const HostWeight& w : biases[p]) host[3 + p].push_back(w.view());
    }
    host_experts = experts_over(host, hidden, inter, bias, kernels::ExpertActivation::kClampedSwiglu);
  }
};

// A step of num_tokens random tokens and routings for packed experts, and how the device runs it:
// from 64 rows per expert the grouped GEMMs over bf16 copies (bf16 roundings), below that the
// streamed tiles (x and the activations rounded to f16).
struct PackedStep {
  std::vector<float> x;
  std::vector<int32_t> ids;
  std::vector<float> weights;
  bool on_grouped_gemm = false;
  DType rounding = DType::kF16;
};
// grouped_rows: the rows an expert from which the step takes the grouped GEMMs (the backend's rule:
// 24 for FP8 experts on the FP8 kernel, else 64).
PackedStep packed_step(std::mt19937& rng, int64_t num_tokens, int64_t hidden, int64_t grouped_rows = 64) {
  PackedStep step;
  step.x = random_floats(rng, static_cast<size_t>(num_tokens * hidden));
  random_routing(rng, num_tokens, step.ids, step.weights);
  step.on_grouped_gemm = num_tokens * kTopK >= grouped_rows * kNumExperts;
  step.rounding = step.on_grouped_gemm ? DType::kBF16 : DType::kF16;
  return step;
}

// Packed (MXFP4 or FP8) experts loaded on one backend, with their biases where the layer has them.
struct DevicePackedLayer {
  std::vector<kernels::WeightView> views[6];
  kernels::MoeExperts experts;

  DevicePackedLayer(Backend& backend, const std::vector<kernels::WeightView> (&host)[6],
                    const kernels::MoeExperts& host_experts, const std::vector<HostWeight> (*biases)[3] = nullptr) {
    for (int p = 0; p < 3; ++p) {
      for (const kernels::WeightView& w : host[p]) views[p].push_back(backend.load_packed_weight(w).value());
      if (biases == nullptr) continue;
      for (const HostWeight& w : (*biases)[p]) views[3 + p].push_back(load(backend, w));
    }
    experts = experts_over(views, host_experts);
  }
};

// Decode-sized steps on the streamed tiles (x and the activations rounded to f16, the codes and
// scales exact), one n-tile of 8 rows up to 8 tokens (their inputs staged in shared memory: 8
// tokens fill it) and four above (9 tokens: the first); from 64 rows per expert the
// grouped GEMMs over the experts dequantised to bf16 (exact for these scales), a few experts at a
// time where a layer's bf16 copy passes 256 MiB (GPT-OSS's 2880 x 2880: five at a time, so the
// twelve experts routed to take three passes). The oracle covers the first tokens of the largest
// shape only, which route to at least 11 of the 12 experts.
TEST(CudaMoeExperts, Mxfp4ExpertsMatchTheirDequantisation) {
  std::mt19937 rng(2880);
  auto backend = cuda_backend();
  ASSERT_TRUE(backend->reads_packed_weights(DType::kMxfp4, WeightUse::kExperts));
  struct Case {
    Shape shape;
    std::vector<int64_t> tokens;
    int64_t checked_tokens;  // 0: all
  };
  using kernels::ExpertActivation;
  const Case cases[] = {{{64, 32, false, ExpertActivation::kClampedSwiglu}, {1, 2, 5, 64, 300}, 0},
                        {{96, 160, true, ExpertActivation::kClampedSwiglu}, {1, 5, 120, 300}, 0},
                        {{2880, 2880, true, ExpertActivation::kClampedSwiglu}, {1, 5, 16, 300}, 6},
                        // Last, so the cases above keep their random draws.
                        {{96, 160, true, ExpertActivation::kClampedSwiglu}, {8, 9}, 0}};
  for (const Case& c : cases) {
    const Shape& s = c.shape;
    const Mxfp4Layer layer(rng, s.hidden, s.inter, s.bias, false);
    const DevicePackedLayer device(*backend, layer.host, layer.host_experts, &layer.biases);
    for (int64_t num_tokens : c.tokens) {
      const auto [x, ids, weights, on_grouped_gemm, rounding] = packed_step(rng, num_tokens, s.hidden);
      const int64_t checked = c.checked_tokens > 0 ? std::min(c.checked_tokens, num_tokens) : num_tokens;
      if (on_grouped_gemm && checked < num_tokens) {
        const std::set<int32_t> experts(ids.begin(), ids.begin() + checked * kTopK);
        ASSERT_GE(experts.size(), 11u) << "the checked tokens should cover every pass of the grouped GEMMs";
      }
      double max_h = 0.0;
      double max_y = 0.0;
      const std::vector<float> want =
          oracle(x, checked, ids, weights, layer.host_experts, rounding, on_grouped_gemm, max_h, max_y);
      std::vector<int64_t> counts;
      std::vector<float> got = run(*backend, device.experts, x, num_tokens, ids, weights, &counts);
      got.resize(want.size());
      const std::string what = "mxfp4 " + std::to_string(s.hidden) + "x" + std::to_string(s.inter) +
                               (s.bias ? " +bias" : "") + " tokens " + std::to_string(num_tokens);
      expect_close(got, want, output_tolerance(s, rounding, max_h, max_y, on_grouped_gemm, layer.max_down), 1e-5, what);
      EXPECT_EQ(counts, expected_counts(ids)) << what;
    }
  }
}

// Scales up to 2^33 on the streamed tiles: the f16 values are scaled by their row's largest scale,
// so none overflows. Output column 0 (down row 0) is held to its own weights' tolerance.
TEST(CudaMoeExperts, Mxfp4HighScalesStayFinite) {
  std::mt19937 rng(140);
  auto backend = cuda_backend();
  const Shape s{256, 96, true, kernels::ExpertActivation::kClampedSwiglu};
  const Mxfp4Layer layer(rng, s.hidden, s.inter, s.bias, true);
  const DevicePackedLayer device(*backend, layer.host, layer.host_experts, &layer.biases);
  for (int64_t num_tokens : {1, 5}) {
    const auto x = random_floats(rng, static_cast<size_t>(num_tokens * s.hidden));
    std::vector<int32_t> ids;
    std::vector<float> weights;
    random_routing(rng, num_tokens, ids, weights);
    double max_h = 0.0;
    double max_y = 0.0;
    const std::vector<float> want =
        oracle(x, num_tokens, ids, weights, layer.host_experts, DType::kF16, false, max_h, max_y);
    ASSERT_GT(max_y, 1e9) << "down row 0 should pass the f16 range many times over";
    const std::vector<float> got = run(*backend, device.experts, x, num_tokens, ids, weights, nullptr);
    std::vector<float> got_rest, want_rest, got_first, want_first;
    for (size_t i = 0; i < got.size(); ++i) {
      (i % static_cast<size_t>(s.hidden) == 0 ? got_first : got_rest).push_back(got[i]);
      (i % static_cast<size_t>(s.hidden) == 0 ? want_first : want_rest).push_back(want[i]);
    }
    const std::string what = "mxfp4 high scales, tokens " + std::to_string(num_tokens);
    expect_close(got_rest, want_rest, output_tolerance(s, DType::kF16, max_h, 0.0, false, layer.max_down), 1e-5,
                 what + ", columns 1..");
    expect_close(got_first, want_first,
                 output_tolerance(s, DType::kF16, max_h, 0.0, false, 6.0 * std::ldexp(1.0, 160 - 127)), 1e-5,
                 what + ", column 0");
  }
}

// FP8 experts as DeepSeek-V3 publishes them: e4m3 codes (both signs, no NaN) with a float32 scale
// per block_rows x 128 block, of 2^-6 to 2^-4 / sqrt(fan-in) (weights near 1 / sqrt(fan-in)); with
// subnormal_codes every code subnormal (2^-9 to 7 * 2^-9) and the scales 2^3 to 2^5 / sqrt(fan-in).
struct Fp8Layer {
  std::vector<std::vector<uint8_t>> codes[3];
  std::vector<std::vector<float>> scales[3];
  std::vector<kernels::WeightView> host[6];
  kernels::MoeExperts host_experts;
  // The same weights dequantised and rounded to bf16, as the grouped GEMMs read them.
  std::vector<HostWeight> bf16[3];
  std::vector<kernels::WeightView> bf16_views[6];
  kernels::MoeExperts bf16_experts;
  double max_down = 0.0;  // the largest |down weight| a code and scale can make

  Fp8Layer(std::mt19937& rng, int64_t hidden, int64_t inter, int32_t block_rows, bool subnormal_codes) {
    const int64_t shapes[3][2] = {{inter, hidden}, {inter, hidden}, {hidden, inter}};
    std::uniform_int_distribution<int> byte(0, 255);
    for (int p = 0; p < 3; ++p) {
      const int64_t rows = shapes[p][0];
      const int64_t cols = shapes[p][1];
      const float spread = 1.0f / std::sqrt(static_cast<float>(cols));
      const int64_t blocks = (rows + block_rows - 1) / block_rows * (cols / 128);
      for (int32_t e = 0; e < kNumExperts; ++e) {
        std::vector<uint8_t> c(static_cast<size_t>(rows * cols));
        for (uint8_t& v : c) {
          do {
            v = static_cast<uint8_t>(byte(rng));
            if (subnormal_codes) v &= 0x87;
          } while ((v & 0x7f) == 0x7f || (subnormal_codes && (v & 0x07) == 0));
        }
        codes[p].push_back(std::move(c));
        const float low = subnormal_codes ? spread * 8 : spread / 64;
        scales[p].push_back(random_floats(rng, static_cast<size_t>(blocks), low, low * 4));
      }
      if (p == 2) max_down = (subnormal_codes ? 7.0 / 512 * 32 : 448.0 / 16) * spread;
      for (int32_t e = 0; e < kNumExperts; ++e) {
        const kernels::WeightView view{codes[p][static_cast<size_t>(e)].data(), DType::kF8E4M3, rows, cols,
                                       scales[p][static_cast<size_t>(e)].data(), block_rows, 128};
        host[p].push_back(view);
        std::vector<float> values(static_cast<size_t>(rows * cols));
        for (int64_t r = 0; r < rows; ++r) kernels::ref::dequantize_weight_row(view, r, &values[r * cols]);
        bf16[p].push_back(make_weight(values, DType::kBF16, rows, cols));
      }
      for (const HostWeight& w : bf16[p]) bf16_views[p].push_back(w.view());
    }
    host_experts = experts_over(host, hidden, inter, false, kernels::ExpertActivation::kSiluGated);
    bf16_experts = experts_over(bf16_views, hidden, inter, false, kernels::ExpertActivation::kSiluGated);
  }
};

// FP8 experts read packed: the streamed tiles (x and the activations rounded to f16, codes exact,
// each 128-column span promoted with its block's scale) at one n-tile (up to 8 tokens, staged) and
// four, and the grouped GEMMs: in 128 x 128 blocks from 24 rows per expert on the FP8 kernel (x and
// the activations quantised per 128 columns as the oracle quantises them, float32 outputs; 150
// tokens: ~38 rows an expert), other blocks from 64 rows over the experts dequantised to bf16
// (against the same bf16 weights). Scale blocks of 128
// and of 64 rows; shapes whose rows end inside a block; a layer of subnormal codes of both signs;
// steps whose experts span several 128-row tiles (1000 tokens: ~330 rows an expert) and K of many
// slices, more than the kernel's ring holds (1024). The FP8 kernel's sums keep fewer bits inside
// each 128-column slice, and an activation that lands near a rounding boundary of its code may take
// the neighbouring one, so its outputs are held to a root-mean-square error as well as a looser
// bound per value.
TEST(CudaMoeExperts, Fp8ExpertsMatchTheirDequantisation) {
  std::mt19937 rng(7168);
  auto backend = cuda_backend();
  ASSERT_TRUE(backend->reads_packed_weights(DType::kF8E4M3, WeightUse::kExperts));
  struct Case {
    Shape shape;
    int32_t block_rows;
    bool subnormal_codes;
    std::vector<int64_t> tokens;
  };
  using kernels::ExpertActivation;
  const Case cases[] = {
      {{256, 128, false, ExpertActivation::kSiluGated}, 128, false, {1, 2, 5, 8, 9, 64, 150, 300, 1000}},
      {{384, 640, false, ExpertActivation::kSiluGated}, 64, false, {1, 7, 33, 300}},
      {{1024, 384, false, ExpertActivation::kSiluGated}, 128, false, {3, 300, 600}},
      {{256, 256, false, ExpertActivation::kSiluGated}, 128, true, {1, 9, 300}}};
  for (const Case& c : cases) {
    const Shape& s = c.shape;
    const Fp8Layer layer(rng, s.hidden, s.inter, c.block_rows, c.subnormal_codes);
    const DevicePackedLayer device(*backend, layer.host, layer.host_experts);
    for (int p = 0; p < 3; ++p) {
      for (const kernels::WeightView& w : device.views[p]) ASSERT_EQ(w.dtype, DType::kF8E4M3) << "kept packed";
    }
    for (int64_t num_tokens : c.tokens) {
      const auto [x, ids, weights, on_grouped_gemm, rounding] =
          packed_step(rng, num_tokens, s.hidden, c.block_rows == 128 ? 24 : 64);
      const bool on_fp8_kernel = on_grouped_gemm && c.block_rows == 128;
      const bool on_bf16_copies = on_grouped_gemm && !on_fp8_kernel;
      double max_h = 0.0;
      double max_y = 0.0;
      const std::vector<float> want =
          oracle(x, num_tokens, ids, weights, on_bf16_copies ? layer.bf16_experts : layer.host_experts,
                 on_fp8_kernel ? DType::kF8E4M3 : rounding, on_bf16_copies, max_h, max_y);
      std::vector<int64_t> counts;
      const std::vector<float> got = run(*backend, device.experts, x, num_tokens, ids, weights, &counts);
      const std::string what = "fp8 " + std::to_string(s.hidden) + "x" + std::to_string(s.inter) + " blocks of " +
                               std::to_string(c.block_rows) + " rows" + (c.subnormal_codes ? ", subnormal codes" : "") +
                               ", tokens " + std::to_string(num_tokens);
      EXPECT_EQ(counts, expected_counts(ids)) << what;
      if (!on_fp8_kernel) {
        expect_close(got, want, output_tolerance(s, rounding, max_h, max_y, on_grouped_gemm, layer.max_down), 1e-5,
                     what);
        continue;
      }
      // Four activations a token each a code off (an e4m3 code is at most 1/8 of its value from the
      // next), or 2 % of the largest down output, per value; 0.5 % of the outputs' RMS overall.
      expect_close(got, want, 0.5 * max_h * layer.max_down + 0.02 * max_y, 0.0, what + " (the FP8 kernel)");
      double error_squares = 0.0, want_squares = 0.0;
      for (size_t i = 0; i < want.size(); ++i) {
        error_squares += (static_cast<double>(got[i]) - want[i]) * (static_cast<double>(got[i]) - want[i]);
        want_squares += static_cast<double>(want[i]) * want[i];
      }
      EXPECT_LE(std::sqrt(error_squares), 5e-3 * std::sqrt(want_squares)) << what << " (the FP8 kernel)";
    }
  }
}

}  // namespace
}  // namespace deepinfer::testing
