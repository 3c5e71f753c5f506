// The decode fusion of the CUDA backend (matmul_add and norm_gated_mlp_add: a layer's residual add
// in the GEMV's epilogue; norm_matmul) against the unfused ops on the same device, bit for bit, and
// against the kernels::ref sequence; and whole bf16 models
// decoding one token per step (the fused path) against their float32 path and their own prefill,
// and against the same steps with BackendOptions::fused_decode off, bit for bit.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>

#include "bf16_model.h"
#include "cuda_test_util.h"
#include "engine/generator.h"
#include "fixtures.h"
#include "kernels/ops.h"
#include "model/model.h"
#include "sampling/logprobs.h"

namespace deepinfer::testing {
namespace {

void expect_same_bits(const std::vector<float>& got, const std::vector<float>& want, const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  size_t misses = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    uint32_t a = 0;
    uint32_t b = 0;
    std::memcpy(&a, &got[i], 4);
    std::memcpy(&b, &want[i], 4);
    if (a != b) {
      if (misses == 0) ADD_FAILURE() << what << ": index " << i << " fused " << got[i] << " unfused " << want[i];
      ++misses;
    }
  }
  EXPECT_EQ(misses, 0u) << what << ": " << misses << " of " << got.size() << " differ";
}

// A norm weight, the products' weights and a residual stream of `rows` rows for one case.
struct Layer {
  HostWeight norm;
  kernels::WeightView norm_view;
  float offset;
  std::vector<float> residual;
  NormWeights weights() const { return NormWeights{norm_view, offset, 1e-5f}; }
};

Layer make_layer(Backend& backend, std::mt19937& rng, DType dtype, int64_t rows, int64_t dim, float offset) {
  Layer layer{make_weight(random_floats(rng, static_cast<size_t>(dim), 0.5f, 1.5f), dtype, 1, dim), {}, offset,
              random_floats(rng, static_cast<size_t>(rows * dim), -2.0f, 2.0f)};
  layer.norm_view = load(backend, layer.norm, "input_layernorm.weight");
  return layer;
}

// ref: rms_norm of the residual, rounded to the weight dtype (the GEMV's input), the product.
std::vector<float> ref_norm_product(const Layer& layer, const HostWeight& w, int64_t rows) {
  std::vector<float> normed(layer.residual.size());
  kernels::ref::rms_norm(layer.residual.data(), layer.norm.view(), layer.offset, rows, w.cols, 1e-5f, normed.data());
  const std::vector<float> xr = make_weight(normed, w.dtype, 1, static_cast<int64_t>(normed.size())).rounded;
  std::vector<float> y(static_cast<size_t>(rows * w.rows));
  kernels::ref::matmul(xr.data(), w.view(), kernels::WeightView{}, rows, y.data());
  return y;
}

struct Shape {
  int64_t rows, n, k;
};

// norm_matmul against the ref sequence, up to the float32 order of the sums (and a bf16 rounding of
// the normed input flipping the other way: one ulp of |x| < 8 on a few terms); matmul_add's GEMV
// epilogue gives the unfused ops' bits and the ref values.
void check_norm_matmul_and_add(Backend& backend, std::mt19937& rng, DType dtype, const Shape& s, float offset) {
  const std::string what = std::string(dtype_name(dtype)) + " " + std::to_string(s.rows) + "x" + std::to_string(s.n) +
                           "x" + std::to_string(s.k) + " offset " + std::to_string(offset);
  const Layer layer = make_layer(backend, rng, dtype, s.rows, s.k, offset);
  const HostWeight w = make_weight(random_floats(rng, static_cast<size_t>(s.n * s.k), -0.1f, 0.1f), dtype, s.n, s.k);
  const kernels::WeightView dw = load(backend, w, "q_proj.weight");
  DeviceBuffer dres = upload(backend, layer.residual);
  DeviceBuffer dnormed = backend.allocate(layer.residual.size() * sizeof(float));
  DeviceBuffer dy = backend.allocate(static_cast<size_t>(s.rows * s.n) * sizeof(float));
  backend.norm_matmul(dres.as<float>(), layer.weights(), dw, s.rows, dnormed.as<float>(), dy.as<float>());
  const auto y = download<float>(backend, dy, static_cast<size_t>(s.rows * s.n));
  expect_close(y, ref_norm_product(layer, w, s.rows), 0.05, 1e-3, "norm_matmul vs ref " + what);

  // residual ([rows, n]) += x w'^T with w' [n, k]: the o / down product's epilogue.
  const auto x = random_floats(rng, static_cast<size_t>(s.rows * s.k));
  const auto start = random_floats(rng, static_cast<size_t>(s.rows * s.n), -4.0f, 4.0f);
  DeviceBuffer dx = upload(backend, x);
  DeviceBuffer dsum = upload(backend, start);
  DeviceBuffer dsum_unfused = upload(backend, start);
  DeviceBuffer ddelta = backend.allocate(start.size() * sizeof(float));
  backend.matmul_add(dx.as<float>(), dw, s.rows, ddelta.as<float>(), dsum.as<float>());
  backend.Backend::matmul_add(dx.as<float>(), dw, s.rows, ddelta.as<float>(), dsum_unfused.as<float>());
  const auto sum = download<float>(backend, dsum, start.size());
  expect_same_bits(sum, download<float>(backend, dsum_unfused, start.size()), "matmul_add " + what);
  const std::vector<float> xr = make_weight(x, dtype, 1, static_cast<int64_t>(x.size())).rounded;
  std::vector<float> want(start.size());
  kernels::ref::matmul(xr.data(), w.view(), kernels::WeightView{}, s.rows, want.data());
  for (size_t i = 0; i < want.size(); ++i) want[i] += start[i];
  expect_close(sum, want, 1e-3, 1e-4, "matmul_add vs ref " + what);
}

TEST(CudaFusedDecode, ResidualAddsGiveTheUnfusedBits) {
  std::mt19937 rng(2026);
  auto backend = cuda_backend();
  ASSERT_TRUE(backend->fuses_norm_products(1, DType::kBF16));
  ASSERT_TRUE(backend->fuses_norm_products(2, DType::kF16));
  EXPECT_FALSE(backend->fuses_norm_products(3, DType::kBF16));
  EXPECT_FALSE(backend->fuses_norm_products(1, DType::kF32));
  // K = 4096 and 2056: the 1024-thread norm (2056: threads with one column more); K = 1032: the
  // 256-thread norm; N not a multiple of the block's columns.
  const Shape shapes[] = {{1, 512, 4096}, {2, 1030, 4096}, {1, 258, 2056}, {2, 64, 1032}, {1, 100, 1032}};
  for (DType dtype : {DType::kBF16, DType::kF16}) {
    for (const Shape& s : shapes) check_norm_matmul_and_add(*backend, rng, dtype, s, 0.0f);
  }
  check_norm_matmul_and_add(*backend, rng, DType::kBF16, {2, 300, 2048}, 1.0f);  // Gemma's w - 1 storage
}

// norm_gated_mlp_add: residual += down(act(gate . norm(residual)) * (up . norm(residual))).
void check_norm_gated_mlp_add(Backend& backend, std::mt19937& rng, DType dtype, GluActivation activation,
                              int64_t rows, int64_t hidden, int64_t intermediate) {
  const std::string what = std::string(dtype_name(dtype)) +
                           (activation == GluActivation::kGeluTanh ? " gelu " : " silu ") + std::to_string(rows) +
                           "x" + std::to_string(hidden) + " I=" + std::to_string(intermediate);
  const Layer layer = make_layer(backend, rng, dtype, rows, hidden, 0.0f);
  const auto weight = [&](int64_t r, int64_t c) {
    return make_weight(random_floats(rng, static_cast<size_t>(r * c), -0.1f, 0.1f), dtype, r, c);
  };
  const HostWeight gate = weight(intermediate, hidden);
  const HostWeight up = weight(intermediate, hidden);
  const HostWeight down = weight(hidden, intermediate);
  auto stacked =
      backend.load_stacked_weight({tensor_of(gate, "mlp.gate_proj.weight"), tensor_of(up, "mlp.up_proj.weight")});
  ASSERT_TRUE(stacked.ok() && stacked->has_value());
  const kernels::WeightView down_view = load(backend, down, "mlp.down_proj.weight");
  const size_t size = layer.residual.size();
  DeviceBuffer dres = upload(backend, layer.residual);
  DeviceBuffer dres_unfused = upload(backend, layer.residual);
  DeviceBuffer dnormed = backend.allocate(size * sizeof(float));
  DeviceBuffer ddelta = backend.allocate(size * sizeof(float));
  DeviceBuffer dscratch = backend.allocate(static_cast<size_t>(2 * rows * intermediate) * sizeof(float));
  backend.norm_gated_mlp_add(dres.as<float>(), layer.weights(), **stacked, down_view, rows, activation,
                             dnormed.as<float>(), dscratch.as<float>(), ddelta.as<float>());
  backend.Backend::norm_gated_mlp_add(dres_unfused.as<float>(), layer.weights(), **stacked, down_view, rows, activation,
                                      dnormed.as<float>(), dscratch.as<float>(), ddelta.as<float>());
  const auto got = download<float>(backend, dres, size);
  expect_same_bits(got, download<float>(backend, dres_unfused, size), "norm_gated_mlp_add " + what);

  // ref: norm, rounded input, gate and up, the activation rounded (down's input), down, the add.
  std::vector<float> normed(size);
  kernels::ref::rms_norm(layer.residual.data(), layer.norm.view(), 0.0f, rows, hidden, 1e-5f, normed.data());
  const std::vector<float> xr = make_weight(normed, dtype, 1, static_cast<int64_t>(size)).rounded;
  std::vector<float> g(static_cast<size_t>(rows * intermediate));
  std::vector<float> u(g.size());
  kernels::ref::matmul(xr.data(), gate.view(), kernels::WeightView{}, rows, g.data());
  kernels::ref::matmul(xr.data(), up.view(), kernels::WeightView{}, rows, u.data());
  if (activation == GluActivation::kGeluTanh) {
    kernels::ref::gelu_tanh_mul(g.data(), u.data(), static_cast<int64_t>(g.size()), g.data());
  } else {
    kernels::ref::silu_mul(g.data(), u.data(), static_cast<int64_t>(g.size()), g.data());
  }
  const std::vector<float> act = make_weight(g, dtype, 1, static_cast<int64_t>(g.size())).rounded;
  std::vector<float> want(size);
  kernels::ref::matmul(act.data(), down.view(), kernels::WeightView{}, rows, want.data());
  for (size_t i = 0; i < size; ++i) want[i] += layer.residual[i];
  expect_close(got, want, 0.02, 1e-3, "norm_gated_mlp_add vs ref " + what);
}

TEST(CudaFusedDecode, NormGatedMlpAddGivesTheUnfusedBits) {
  std::mt19937 rng(11);
  auto backend = cuda_backend();
  for (DType dtype : {DType::kBF16, DType::kF16}) {
    for (GluActivation activation : {GluActivation::kSilu, GluActivation::kGeluTanh}) {
      check_norm_gated_mlp_add(*backend, rng, dtype, activation, 1, 2048, 1000);
      check_norm_gated_mlp_add(*backend, rng, dtype, activation, 2, 1032, 136);
    }
  }
}

// Shapes the GEMV does not take (three rows; the batch-invariant mode) run the unfused defaults.
TEST(CudaFusedDecode, OtherShapesTakeTheDefaults) {
  std::mt19937 rng(3);
  for (const bool invariant : {false, true}) {
    auto backend = cuda_backend(invariant);
    EXPECT_EQ(backend->fuses_norm_products(1, DType::kBF16), !invariant);
    check_norm_matmul_and_add(*backend, rng, DType::kBF16, {invariant ? 1 : 3, 136, 1032}, 0.0f);
    check_norm_gated_mlp_add(*backend, rng, DType::kBF16, GluActivation::kSilu, invariant ? 2 : 3, 264, 136);
  }
}

// Log-softmax of the top-1 token of want, and whether got has the same top-1.
struct RowCompare {
  bool same_top;
  double diff;
};

RowCompare compare_rows(const float* got, const float* want, int64_t vocab) {
  const std::vector<double> lg = log_softmax(got, vocab);
  const std::vector<double> lw = log_softmax(want, vocab);
  const auto top = std::max_element(lw.begin(), lw.end()) - lw.begin();
  return {std::max_element(lg.begin(), lg.end()) - lg.begin() == top,
          std::abs(lg[static_cast<size_t>(top)] - lw[static_cast<size_t>(top)])};
}

// One token per step through Generator (decode steps: the fused layers, from a graph after the
// first) against the bf16 model's prefill of the whole sequence (cuBLASLt, norms as kernels) and
// the float32 model. The bf16 prefill differs only in the order of sums and which values round
// the other way, so its bound is tighter than bf16 vs float32 (Bf16AgreesWithFloat32Path's).
constexpr size_t kPrefix = 4;

// Logits of tokens[kPrefix..] decoded one per step after a prefill of the first kPrefix.
std::vector<float> decode_steps(CausalLM& model, const std::vector<int32_t>& tokens) {
  std::vector<float> decoded;
  Generator generator(model, 16, static_cast<int64_t>(tokens.size()));
  EXPECT_TRUE(generator.append({tokens.begin(), tokens.begin() + kPrefix}, false).ok());
  for (size_t t = kPrefix; t < tokens.size(); ++t) {
    const std::vector<float> row = generator.append({tokens[t]}, false).value();
    decoded.insert(decoded.end(), row.begin(), row.end());
  }
  return decoded;
}

void expect_decode_agrees(const std::string& name) {
  const auto tokens = load_expected(name)["score"]["tokens"].get<std::vector<int32_t>>();
  ASSERT_GT(tokens.size(), 8u);
  const std::string bf16_dir = write_bf16_copy(fixture_dir(name), name);
  auto backend = cuda_backend();
  auto bf16 = load_model(bf16_dir, *backend, false);
  ASSERT_TRUE(bf16.ok()) << bf16.error().message;
  CausalLM& model = **bf16;
  const int64_t vocab = model.config().vocab_size;
  const std::vector<float> decoded = decode_steps(model, tokens);
  // The same steps unfused: the residual adds as add_rms_norm. Same bits.
  BackendOptions unfused_options;
  unfused_options.fused_decode = false;
  auto unfused_backend = make_backend("cuda", unfused_options).value();
  auto unfused = load_model(bf16_dir, *unfused_backend, false);
  ASSERT_TRUE(unfused.ok()) << unfused.error().message;
  expect_same_bits(decoded, decode_steps(**unfused, tokens), name + " fused vs unfused decode steps");

  Generator prefill(model, 16, static_cast<int64_t>(tokens.size()));
  const std::vector<float> prefilled = prefill.append(tokens, true).value();
  auto f32_backend = cuda_backend();
  auto f32 = load_model(fixture_dir(name), *f32_backend, false);
  ASSERT_TRUE(f32.ok()) << f32.error().message;
  Generator f32_prefill(**f32, 16, static_cast<int64_t>(tokens.size()));
  const std::vector<float> reference = f32_prefill.append(tokens, true).value();

  const size_t steps = tokens.size() - kPrefix;
  size_t agree_bf16 = 0;
  size_t agree_f32 = 0;
  double diff_bf16 = 0.0;
  double diff_f32 = 0.0;
  for (size_t i = 0; i < steps; ++i) {
    const float* row = decoded.data() + i * static_cast<size_t>(vocab);
    const size_t position = (kPrefix + i) * static_cast<size_t>(vocab);
    const RowCompare a = compare_rows(row, prefilled.data() + position, vocab);
    const RowCompare b = compare_rows(row, reference.data() + position, vocab);
    agree_bf16 += a.same_top ? 1 : 0;
    agree_f32 += b.same_top ? 1 : 0;
    diff_bf16 = std::max(diff_bf16, a.diff);
    diff_f32 = std::max(diff_f32, b.diff);
  }
  const double n = static_cast<double>(steps);
  std::printf("[fused decode] %s: %zu steps; vs bf16 prefill top-1 %.3f max |dlogprob| %.4f; vs f32 top-1 %.3f "
              "max |dlogprob| %.4f\n",
              name.c_str(), steps, agree_bf16 / n, diff_bf16, agree_f32 / n, diff_f32);
  EXPECT_GE(agree_bf16 / n, 0.8) << name;
  EXPECT_LT(diff_bf16, 0.25) << name;
  EXPECT_GE(agree_f32 / n, 0.7) << name;
  EXPECT_LT(diff_f32, 0.5) << name;
}

TEST(CudaFusedDecode, Bf16DecodeStepsAgreeWithPrefillAndFloat32) {
  // llama: the plain layer; qwen3: qk-norm in the front end; mistral_swa: a sliding window.
  for (const char* name : {"llama", "qwen3", "mistral_swa"}) expect_decode_agrees(name);
}

}  // namespace
}  // namespace deepinfer::testing
