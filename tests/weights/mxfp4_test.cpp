// MXFP4 (OCP Microscaling v1.0, as GPT-OSS checkpoints store their experts): the e2m1 code table
// and e8m0 scales of the specification, the nibble order transformers reads (element 2j in the
// low nibble of byte j), U8 tensors through safetensors, and errors that name the tensor.
#include "weights/mxfp4.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>

#include "test_files.h"

namespace deepinfer {
namespace {

using ::testing::HasSubstr;
using testing::TempDir;

TensorView u8_view(const std::string& name, std::vector<int64_t> shape, const std::vector<uint8_t>& bytes) {
  TensorView view;
  view.name = name;
  view.dtype = DType::kU8;
  view.shape = std::move(shape);
  view.data = bytes.data();
  view.size_bytes = bytes.size();
  return view;
}

TEST(Mxfp4Test, E2m1CodesAreTheSpecificationsValues) {
  // OCP MX v1.0, table "FP4 (E2M1)": exponent bias 1, one mantissa bit, subnormal 0.5, max 6.
  const float want[16] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f,
                          -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f};
  for (uint8_t code = 0; code < 16; ++code) {
    EXPECT_EQ(e2m1_to_f32(code), want[code]) << int{code};
    EXPECT_EQ(std::signbit(e2m1_to_f32(code)), code >= 8) << int{code};
  }
}

TEST(Mxfp4Test, DequantisesEachGroupWithItsScaleAndNibbleOrder) {
  // Two matrices of 2 rows x 64 columns (2 groups a row); the test reads matrix 1.
  std::vector<uint8_t> blocks(2 * 2 * 2 * 16, 0);
  std::vector<uint8_t> scales(2 * 2 * 2, 127);
  const size_t matrix1 = 2 * 2 * 16;
  blocks[matrix1 + 0] = 0x72;   // row 0, group 0: elements 0, 1 = codes 2 (1.0), 7 (6.0)
  blocks[matrix1 + 15] = 0x9f;  // elements 30, 31 = codes 15 (-6.0), 9 (-0.5)
  blocks[matrix1 + 16] = 0x01;  // row 0, group 1: element 32 = 0.5, element 33 = 0
  blocks[matrix1 + 48] = 0xa4;  // row 1, group 1: element 32 = 2.0, element 33 = -1.0
  scales[4 + 0] = 127;          // 2^0
  scales[4 + 1] = 130;          // 2^3
  scales[4 + 3] = 125;          // 2^-2
  const std::vector<int64_t> shape = {2, 2, 2, 16};
  Result<std::vector<float>> out =
      dequantize_mxfp4(u8_view("e_blocks", shape, blocks), u8_view("e_scales", {2, 2, 2}, scales), 1);
  ASSERT_TRUE(out.ok()) << out.error().message;
  ASSERT_EQ(out->size(), 2u * 64u);
  EXPECT_EQ((*out)[0], 1.0f);
  EXPECT_EQ((*out)[1], 6.0f);
  EXPECT_EQ((*out)[30], -6.0f);
  EXPECT_EQ((*out)[31], -0.5f);
  EXPECT_EQ((*out)[32], 4.0f);   // 0.5 * 2^3
  EXPECT_EQ((*out)[33], 0.0f);
  EXPECT_EQ((*out)[64 + 32], 0.5f);   // 2.0 * 2^-2
  EXPECT_EQ((*out)[64 + 33], -0.25f);  // -1.0 * 2^-2
  EXPECT_EQ((*out)[64 + 0], 0.0f);
}

TEST(Mxfp4Test, ExtremeScales) {
  std::vector<uint8_t> blocks(16, 0x22);  // 1.0 everywhere
  std::vector<uint8_t> scales = {0};
  auto out = dequantize_mxfp4(u8_view("b", {1, 1, 1, 16}, blocks), u8_view("s", {1, 1, 1}, scales), 0);
  ASSERT_TRUE(out.ok());
  EXPECT_EQ((*out)[0], std::ldexp(1.0f, -127));
  scales[0] = 254;
  out = dequantize_mxfp4(u8_view("b", {1, 1, 1, 16}, blocks), u8_view("s", {1, 1, 1}, scales), 0);
  EXPECT_EQ((*out)[5], std::ldexp(1.0f, 127));
  scales[0] = 255;  // the format's NaN scale
  out = dequantize_mxfp4(u8_view("b", {1, 1, 1, 16}, blocks), u8_view("s", {1, 1, 1}, scales), 0);
  EXPECT_TRUE(std::isnan((*out)[0]));
}

TEST(Mxfp4Test, BadTensorsAreNamed) {
  const std::vector<uint8_t> blocks(2 * 16, 0);
  const std::vector<uint8_t> scales(2, 127);
  TensorView f32_blocks = u8_view("layer.gate_up_proj_blocks", {1, 2, 1, 16}, blocks);
  f32_blocks.dtype = DType::kF32;
  auto out = dequantize_mxfp4(f32_blocks, u8_view("s", {1, 2, 1}, scales), 0);
  ASSERT_FALSE(out.ok());
  EXPECT_THAT(out.error().message, HasSubstr("layer.gate_up_proj_blocks"));
  EXPECT_THAT(out.error().message, HasSubstr("F32"));
  out = dequantize_mxfp4(u8_view("b", {1, 2, 1, 16}, blocks), u8_view("layer.gate_up_proj_scales", {1, 1, 2}, scales), 0);
  ASSERT_FALSE(out.ok());
  EXPECT_THAT(out.error().message, HasSubstr("layer.gate_up_proj_scales"));
  EXPECT_THAT(out.error().message, HasSubstr("[1, 2, 1]"));
  out = dequantize_mxfp4(u8_view("b", {1, 2, 1, 16}, blocks), u8_view("s", {1, 2, 1}, scales), 1);
  EXPECT_FALSE(out.ok());
}

TEST(Mxfp4Test, U8TensorsRoundTripButAreNoWeights) {
  TempDir dir;
  const std::vector<uint8_t> bytes = {0, 1, 127, 128, 255};
  const std::string path = dir.file("model.safetensors");
  ASSERT_TRUE(write_safetensors(path, {u8_view("e.down_proj_scales", {5}, bytes)}, {}).ok());
  Result<WeightStore> store = WeightStore::open_file(path);
  ASSERT_TRUE(store.ok()) << store.error().message;
  const std::optional<TensorView> found = store->find("e.down_proj_scales");
  ASSERT_TRUE(found.has_value());
  EXPECT_EQ(found->dtype, DType::kU8);
  EXPECT_EQ(std::vector<uint8_t>(static_cast<const uint8_t*>(found->data), static_cast<const uint8_t*>(found->data) + 5),
            bytes);
  Result<TensorView> as_weight = store->get("e.down_proj_scales", {5});
  ASSERT_FALSE(as_weight.ok());
  EXPECT_THAT(as_weight.error().message, HasSubstr("e.down_proj_scales"));
  EXPECT_THAT(as_weight.error().message, HasSubstr("U8"));
}

}  // namespace
}  // namespace deepinfer
