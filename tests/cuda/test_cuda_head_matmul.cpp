// CudaBackend::head_matmul (one strided-batched GEMM over all heads) against the products summed
// in double, over padded strides, float32 / bf16 / f16 weights, one row to more than a decode
// batch; and its batch-invariant twin (the per-head default) on the same case.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "cuda_test_util.h"
#include "head_products_case.h"

namespace deepinfer::testing {
namespace {

std::vector<float> rounded_to(const std::vector<float>& values, DType dtype) {
  if (dtype == DType::kF32) return values;
  std::vector<float> out(values.size());
  for (size_t i = 0; i < values.size(); ++i) {
    out[i] = dtype == DType::kBF16 ? bf16_to_f32(f32_to_bf16(values[i])) : f16_to_f32(f32_to_f16(values[i]));
  }
  return out;
}

void check_case(Backend& backend, const HeadProductsCase& c, DType dtype, std::mt19937& rng, const std::string& what) {
  const std::vector<float> w = random_floats(rng, static_cast<size_t>(c.w_floats()));
  const std::vector<float> x = random_floats(rng, static_cast<size_t>(c.x_floats()));
  const std::vector<float> y_before = random_floats(rng, static_cast<size_t>(c.y_floats()));
  const HostWeight weight = make_weight(w, dtype, c.w_floats() / c.k, c.k);
  const std::vector<float> want = c.expected(rounded_to(x, dtype), weight.rounded, y_before);

  const kernels::WeightView view = load(backend, weight);
  DeviceBuffer dx = upload(backend, x);
  DeviceBuffer dy = upload(backend, y_before);
  DeviceBuffer scratch = backend.allocate(static_cast<size_t>(c.rows * (c.k + c.n)) * sizeof(float));
  backend.head_matmul(c.products(dx.as<float>(), view, dy.as<float>()), scratch.as<float>());
  expect_close(download<float>(backend, dy, want.size()), want, 2e-5 * static_cast<double>(c.k), 1e-4, what);
}

TEST(CudaHeadMatmul, MatchesEachHeadsProductAcrossDtypesAndRows) {
  std::mt19937 rng(21);
  for (bool invariant : {false, true}) {
    auto backend = cuda_backend(invariant);
    for (DType dtype : {DType::kF32, DType::kBF16, DType::kF16}) {
      for (int64_t rows : {1, 2, 5, 67}) {
        HeadProductsCase c;
        c.rows = rows;
        check_case(*backend, c, dtype, rng,
                   std::string(invariant ? "invariant " : "") + std::string(dtype_name(dtype)) + " rows " + std::to_string(rows));
      }
    }
  }
}

// DeepSeek-V2-Lite's two MLA products at decode and prefill sizes: the query absorption (16 heads
// of [512, 128], read out of a [heads, 192] query row) and the value expansion ([128, 512] rows of
// kv_b_proj, 256 rows apart, read out of the [heads, 576] attended latent).
TEST(CudaHeadMatmul, MlaShapes) {
  std::mt19937 rng(22);
  auto backend = cuda_backend();
  for (int64_t rows : {1, 64, 300}) {
    HeadProductsCase absorb;
    absorb.heads = 16;
    absorb.rows = rows;
    absorb.k = 128;
    absorb.n = 512;
    absorb.w_head_stride = 512;
    absorb.x_head_stride = 192;
    absorb.x_row_stride = 16 * 192;
    absorb.y_head_stride = 576;
    absorb.y_row_stride = 16 * 576;
    check_case(*backend, absorb, DType::kBF16, rng, "absorb rows " + std::to_string(rows));

    HeadProductsCase expand;
    expand.heads = 16;
    expand.rows = rows;
    expand.k = 512;
    expand.n = 128;
    expand.w_head_stride = 256;
    expand.x_head_stride = 576;
    expand.x_row_stride = 16 * 576;
    expand.y_head_stride = 128;
    expand.y_row_stride = 16 * 128;
    check_case(*backend, expand, DType::kBF16, rng, "expand rows " + std::to_string(rows));
  }
}

}  // namespace
}  // namespace deepinfer::testing
