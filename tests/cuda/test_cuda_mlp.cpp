// The fused feed-forward pieces of the CUDA backend against the unfused kernels::ref sequence:
// stacked gate|up weights, gated_mlp (GEMV epilogue at M <= 2, GEMM + rounded activation above),
// and the norms' rounded copy that the following products read instead of casting again.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "cuda_test_util.h"
#include "kernels/ops.h"

namespace deepinfer::testing {
namespace {

std::vector<float> rounded(const std::vector<float>& values, DType dtype) {
  return make_weight(values, dtype, 1, static_cast<int64_t>(values.size())).rounded;
}

struct MlpCase {
  int64_t rows, hidden, intermediate;
};

// ref: x rounded to the weight dtype, gate and up products, the activation, its result rounded
// (the down product's input), down. The GPU's sums run in another order, so a product differs by
// float32 rounding and an activation near a bf16 rounding boundary may round the other way: one
// ulp (2^-8 relative) on a few percent of the terms of a down sum. The bound is a tenth of that
// ulp times the sum of |terms|; a wrong row, activation or layout misses it by orders of magnitude.
void check_gated_mlp(Backend& backend, std::mt19937& rng, DType dtype, GluActivation activation, const MlpCase& c) {
  const HostWeight gate = make_weight(random_floats(rng, static_cast<size_t>(c.intermediate * c.hidden), -0.2f, 0.2f),
                                      dtype, c.intermediate, c.hidden);
  const HostWeight up = make_weight(random_floats(rng, static_cast<size_t>(c.intermediate * c.hidden), -0.2f, 0.2f),
                                    dtype, c.intermediate, c.hidden);
  const HostWeight down = make_weight(random_floats(rng, static_cast<size_t>(c.hidden * c.intermediate), -0.2f, 0.2f),
                                      dtype, c.hidden, c.intermediate);
  auto stacked =
      backend.load_stacked_weight({tensor_of(gate, "mlp.gate_proj.weight"), tensor_of(up, "mlp.up_proj.weight")});
  ASSERT_TRUE(stacked.ok()) << stacked.error().message;
  ASSERT_TRUE(stacked->has_value()) << "16-bit parts are stacked on CUDA";
  const kernels::WeightView gate_up = **stacked;
  ASSERT_EQ(gate_up.rows, 2 * c.intermediate);
  const kernels::WeightView down_view = load(backend, down, "mlp.down_proj.weight");

  const auto x = random_floats(rng, static_cast<size_t>(c.rows * c.hidden));
  DeviceBuffer dx = upload(backend, x);
  DeviceBuffer dscratch = backend.allocate(static_cast<size_t>(2 * c.rows * c.intermediate) * sizeof(float));
  DeviceBuffer dout = backend.allocate(static_cast<size_t>(c.rows * c.hidden) * sizeof(float));
  backend.gated_mlp(dx.as<float>(), gate_up, down_view, c.rows, activation, dscratch.as<float>(), dout.as<float>());

  const std::vector<float> xr = rounded(x, dtype);
  std::vector<float> g(static_cast<size_t>(c.rows * c.intermediate));
  std::vector<float> u(g.size());
  kernels::ref::matmul(xr.data(), gate.view(), kernels::WeightView{}, c.rows, g.data());
  kernels::ref::matmul(xr.data(), up.view(), kernels::WeightView{}, c.rows, u.data());
  if (activation == GluActivation::kGeluTanh) {
    kernels::ref::gelu_tanh_mul(g.data(), u.data(), static_cast<int64_t>(g.size()), g.data());
  } else {
    kernels::ref::silu_mul(g.data(), u.data(), static_cast<int64_t>(g.size()), g.data());
  }
  const std::vector<float> act = rounded(g, dtype);
  std::vector<float> want(static_cast<size_t>(c.rows * c.hidden));
  kernels::ref::matmul(act.data(), down.view(), kernels::WeightView{}, c.rows, want.data());
  double l1 = 0.0;
  for (int64_t r = 0; r < c.rows; ++r) {
    for (int64_t j = 0; j < c.hidden; ++j) {
      double sum = 0.0;
      for (int64_t i = 0; i < c.intermediate; ++i) {
        sum += std::abs(static_cast<double>(act[static_cast<size_t>(r * c.intermediate + i)]) *
                        down.rounded[static_cast<size_t>(j * c.intermediate + i)]);
      }
      l1 = std::max(l1, sum);
    }
  }
  expect_close(download<float>(backend, dout, want.size()), want, 0.1 * std::ldexp(1.0, -8) * l1, 0.0,
               "gated_mlp " + std::string(dtype_name(dtype)) +
                   (activation == GluActivation::kGeluTanh ? " gelu " : " silu ") + std::to_string(c.rows) + "x" +
                   std::to_string(c.hidden) + " I=" + std::to_string(c.intermediate));
}

TEST(CudaMlp, GatedMlpMatchesUnfusedReference) {
  std::mt19937 rng(77);
  auto backend = cuda_backend();
  auto invariant = cuda_backend(/*batch_invariant=*/true);
  // M <= 2 with K and I multiples of 8: the GEMV with the activation as epilogue; I = 1001: the
  // GEMM path at M = 1; M >= 3 and the invariant mode: GEMM, rounded activation, down.
  const MlpCase cases[] = {{1, 256, 136}, {2, 1024, 1000}, {1, 1032, 1001}, {3, 256, 136}, {17, 264, 520},
                           {64, 512, 1000}};
  for (DType dtype : {DType::kBF16, DType::kF16}) {
    for (GluActivation activation : {GluActivation::kSilu, GluActivation::kGeluTanh}) {
      for (const MlpCase& c : cases) check_gated_mlp(*backend, rng, dtype, activation, c);
    }
  }
  for (const MlpCase& c : {MlpCase{1, 256, 136}, MlpCase{9, 264, 520}}) {
    check_gated_mlp(*invariant, rng, DType::kBF16, GluActivation::kSilu, c);
  }
}

TEST(CudaMlp, StackingChecksThePartsAndKeepsFloat32Separate) {
  std::mt19937 rng(5);
  auto backend = cuda_backend();
  const HostWeight a = make_weight(random_floats(rng, 8 * 16), DType::kBF16, 8, 16);
  const HostWeight b = make_weight(random_floats(rng, 8 * 24), DType::kBF16, 8, 24);
  auto mismatched = backend->load_stacked_weight({tensor_of(a, "gate"), tensor_of(b, "up")});
  ASSERT_FALSE(mismatched.ok());
  EXPECT_NE(mismatched.error().message.find("up"), std::string::npos) << mismatched.error().message;
  EXPECT_NE(mismatched.error().message.find("16 columns"), std::string::npos) << mismatched.error().message;
  const HostWeight f = make_weight(random_floats(rng, 8 * 16), DType::kF32, 8, 16);
  auto f32 = backend->load_stacked_weight({tensor_of(f, "gate"), tensor_of(f, "up")});
  ASSERT_TRUE(f32.ok());
  EXPECT_FALSE(f32->has_value());
}

// At M >= 3 a norm writes its output's bf16 copy for the products that read it next; every
// other write to that memory must make the products cast again.
TEST(CudaMlp, ProductsAfterANormReadItsValuesAndNothingStale) {
  std::mt19937 rng(99);
  auto backend = cuda_backend();
  const int64_t rows = 12;
  const int64_t dim = 264;
  const int64_t n = 136;
  const HostWeight norm_w = make_weight(random_floats(rng, static_cast<size_t>(dim), 0.5f, 1.5f), DType::kBF16, 1, dim);
  const HostWeight w = make_weight(random_floats(rng, static_cast<size_t>(n * dim)), DType::kBF16, n, dim);
  const kernels::WeightView dnorm = load(*backend, norm_w, "norm.weight");
  const kernels::WeightView dw = load(*backend, w, "proj.weight");
  const auto residual = random_floats(rng, static_cast<size_t>(rows * dim));
  const auto delta = random_floats(rng, static_cast<size_t>(rows * dim));
  DeviceBuffer dres = upload(*backend, residual);
  DeviceBuffer ddelta = upload(*backend, delta);
  DeviceBuffer dnormed = backend->allocate(static_cast<size_t>(rows * dim) * sizeof(float));
  DeviceBuffer dy = backend->allocate(static_cast<size_t>(rows * n) * sizeof(float));
  // The device norm's float32 output may round to bf16 the other way on a few elements (one ulp,
  // |x| < 4, |w| < 1: < 0.016 each); a stale input would be off by whole units.
  const double tol = 0.05;

  const auto expect_product_of = [&](const std::vector<float>& x, const std::string& what) {
    const std::vector<float> xr = rounded(x, DType::kBF16);
    std::vector<float> want(static_cast<size_t>(rows * n));
    kernels::ref::matmul(xr.data(), w.view(), kernels::WeightView{}, rows, want.data());
    expect_close(download<float>(*backend, dy, want.size()), want, tol, 1e-3, what);
  };

  std::vector<float> res = residual;
  std::vector<float> normed(static_cast<size_t>(rows * dim));
  kernels::ref::add_rms_norm(res.data(), delta.data(), norm_w.view(), 0.0f, rows, dim, 1e-5f, normed.data());
  backend->add_rms_norm(dres.as<float>(), ddelta.as<float>(), dnorm, 0.0f, rows, dim, 1e-5f, dnormed.as<float>());
  backend->matmul(dnormed.as<float>(), dw, kernels::WeightView{}, rows, dy.as<float>());
  expect_product_of(normed, "first product after the norm");
  backend->matmul(dnormed.as<float>(), dw, kernels::WeightView{}, rows, dy.as<float>());
  expect_product_of(normed, "second product of the same input");

  // Another op rewrites the normed values: the next product must see them.
  backend->scale(dnormed.as<float>(), rows * dim, -0.5f, dnormed.as<float>());
  std::vector<float> scaled = normed;
  for (float& v : scaled) v *= -0.5f;
  backend->matmul(dnormed.as<float>(), dw, kernels::WeightView{}, rows, dy.as<float>());
  expect_product_of(scaled, "product after scale rewrote its input");

  // An upload into the same memory after a norm.
  backend->rms_norm(dres.as<float>(), dnorm, 0.0f, rows, dim, 1e-5f, dnormed.as<float>());
  const auto fresh = random_floats(rng, static_cast<size_t>(rows * dim));
  backend->copy_to_device(dnormed.data(), fresh.data(), fresh.size() * sizeof(float));
  backend->matmul(dnormed.as<float>(), dw, kernels::WeightView{}, rows, dy.as<float>());
  expect_product_of(fresh, "product after an upload rewrote its input");

  // The attention front end rotates q in place; read as q (3 heads of 88), the normed rows are
  // rotated, and the next product must read the rotated values. This op never invalidated the
  // cast buffer under the old forget-by-hand scheme.
  backend->rms_norm(dres.as<float>(), dnorm, 0.0f, rows, dim, 1e-5f, dnormed.as<float>());
  std::vector<float> q(static_cast<size_t>(rows * dim));
  kernels::ref::rms_norm(res.data(), norm_w.view(), 0.0f, rows, dim, 1e-5f, q.data());
  backend->matmul(dnormed.as<float>(), dw, kernels::WeightView{}, rows, dy.as<float>());
  expect_product_of(q, "product after a norm of the residual");
  constexpr int32_t kHeads = 3;
  constexpr int32_t kHeadDim = 88;
  std::vector<int32_t> positions(static_cast<size_t>(rows));
  for (int64_t t = 0; t < rows; ++t) positions[static_cast<size_t>(t)] = static_cast<int32_t>(100 + 37 * t);
  std::vector<float> inv_freq(kHeadDim / 2);
  for (size_t i = 0; i < inv_freq.size(); ++i) {
    inv_freq[i] = static_cast<float>(1.0 / std::pow(10000.0, 2.0 * static_cast<double>(i) / kHeadDim));
  }
  DeviceBuffer dpositions = upload(*backend, positions);
  DeviceBuffer dinv_freq = upload(*backend, inv_freq);
  DeviceBuffer dk = upload(*backend, random_floats(rng, static_cast<size_t>(rows * kHeadDim)));
  DeviceBuffer dv = upload(*backend, random_floats(rng, static_cast<size_t>(rows * kHeadDim)));
  DeviceBuffer dslots = upload(*backend, std::vector<int32_t>(static_cast<size_t>(rows), -1));
  DeviceBuffer cache = backend->allocate(kHeadDim * sizeof(float));
  kernels::AttentionFrontEnd f;
  f.q = dnormed.as<float>();
  f.k = dk.as<float>();
  f.v = dv.as<float>();
  f.q_stride = dim;
  f.k_stride = f.v_stride = kHeadDim;
  f.num_tokens = rows;
  f.num_heads = kHeads;
  f.num_kv_heads = 1;
  f.head_dim = kHeadDim;
  f.positions = dpositions.as<int32_t>();
  f.rotary_dim = kHeadDim;
  f.inv_freq = dinv_freq.as<float>();
  f.slot_mapping = dslots.as<int32_t>();
  f.k_cache = f.v_cache = cache.data();
  backend->attention_front_end(f);
  kernels::ref::rope(q.data(), positions.data(), rows, kHeads, kHeadDim, kHeadDim, inv_freq.data(), 1.0f,
                     kernels::RopeLayout::kRotateHalf);
  backend->matmul(dnormed.as<float>(), dw, kernels::WeightView{}, rows, dy.as<float>());
  expect_product_of(q, "product after the attention front end rotated its input in place");
}

}  // namespace
}  // namespace deepinfer::testing
