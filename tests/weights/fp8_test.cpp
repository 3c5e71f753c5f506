// FP8 block quantisation (weights/fp8.h) against its own inverse and e4m3's error bound: every
// block's largest magnitude lands on 448, every value within half an e4m3 step, partial edge blocks.
#include "weights/fp8.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "core/dtype.h"

namespace deepinfer {
namespace {

TEST(Fp8Quantize, RoundTripsWithinHalfAStepAndMapsEachBlockMaximumTo448) {
  constexpr int64_t kRows = 300, kCols = 260, kBlock = 128;
  std::mt19937 rng(11);
  std::normal_distribution<float> normal(0.0f, 0.02f);
  std::vector<float> w(static_cast<size_t>(kRows * kCols));
  for (float& v : w) v = normal(rng);
  w[5] = 0.0f;
  const int64_t scale_rows = 3, scale_cols = 3;  // ceil(300 / 128), ceil(260 / 128)
  std::vector<uint8_t> codes(w.size());
  std::vector<float> scales(static_cast<size_t>(scale_rows * scale_cols));
  quantize_fp8_blocks(w.data(), kRows, kCols, kBlock, kBlock, codes.data(), scales.data());

  TensorView weight, scale_inv;
  weight.name = "w";
  weight.dtype = DType::kF8E4M3;
  weight.shape = {kRows, kCols};
  weight.data = codes.data();
  weight.size_bytes = codes.size();
  scale_inv.name = "w_scale_inv";
  scale_inv.dtype = DType::kF32;
  scale_inv.shape = {scale_rows, scale_cols};
  scale_inv.data = scales.data();
  scale_inv.size_bytes = scales.size() * sizeof(float);
  auto back = dequantize_fp8(weight, scale_inv, kBlock, kBlock);
  ASSERT_TRUE(back.ok()) << back.error().message;

  std::vector<float> block_max(scales.size(), 0.0f);
  for (int64_t r = 0; r < kRows; ++r) {
    for (int64_t c = 0; c < kCols; ++c) {
      const size_t i = static_cast<size_t>(r * kCols + c);
      const size_t block = static_cast<size_t>((r / kBlock) * scale_cols + c / kBlock);
      block_max[block] = std::max(block_max[block], std::fabs(w[i]));
      // Half a step: 2^-4 relative for normals, 2^-10 of the scale below e4m3's smallest normal.
      EXPECT_LE(std::fabs((*back)[i] - w[i]), 0.0625f * std::fabs(w[i]) + 0x1p-10f * scales[block]) << r << "," << c;
    }
  }
  for (size_t b = 0; b < scales.size(); ++b) {
    EXPECT_FLOAT_EQ(scales[b] * 448.0f, block_max[b]) << "block " << b;
  }
  EXPECT_EQ(codes[5], 0x00);
}

}  // namespace
}  // namespace deepinfer
