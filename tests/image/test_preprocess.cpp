// Qwen2-VL and Gemma 3 preprocessing against numpy reimplementations of transformers' processors
// run on Pillow's resized pixels (tools/reference/make_image_fixtures.py). The resize is exact
// (test_resize.cpp), so the values differ only by float32 rounding: within 1e-6.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "image/preprocess.h"
#include "image_fixtures.h"

namespace deepinfer {
namespace {

constexpr float kTolerance = 1e-6f;

// Every stride-th value of actual against the fixture's sample of it.
void expect_sampled_values_near(const std::vector<float>& actual, const nlohmann::json& entry) {
  const std::vector<float> expected = test::read_f32_fixture(entry["values"]);
  const size_t stride = entry["stride"];
  ASSERT_EQ(actual.size(), entry["num_values"].get<size_t>());
  ASSERT_EQ(expected.size(), (actual.size() + stride - 1) / stride);
  size_t num_far = 0;
  float max_error = 0.0f;
  for (size_t i = 0; i < expected.size(); ++i) {
    const float error = std::abs(actual[i * stride] - expected[i]);
    max_error = std::max(max_error, error);
    num_far += error > kTolerance;
  }
  EXPECT_EQ(num_far, 0u) << "max error " << max_error;
}

// All of got within kTolerance of a model fixture's pixel values (transformers' processor output).
void expect_values_near(const std::vector<float>& got, const std::vector<float>& want) {
  ASSERT_FALSE(want.empty());
  ASSERT_EQ(got.size(), want.size());
  float max_error = 0.0f;
  for (size_t i = 0; i < want.size(); ++i) max_error = std::max(max_error, std::abs(got[i] - want[i]));
  EXPECT_LE(max_error, kTolerance);
}

TEST(ImagePreprocess, Qwen2VlEqualsTransformers) {
  ASSERT_FALSE(test::image_manifest()["qwen2_vl"].empty());
  for (const auto& entry : test::image_manifest()["qwen2_vl"]) {
    SCOPED_TRACE(entry["values"].get<std::string>());
    Qwen2VlProcessorConfig config;
    config.max_pixels = entry["max_pixels"];
    Result<Qwen2VlPixels> pixels = try_preprocess_qwen2_vl(test::decode_fixture(entry["source"]), config);
    ASSERT_TRUE(pixels.ok()) << pixels.error().message;
    EXPECT_EQ(pixels->resized_height, entry["resized"][0].get<int32_t>());
    EXPECT_EQ(pixels->resized_width, entry["resized"][1].get<int32_t>());
    EXPECT_EQ(pixels->grid_thw[0], entry["grid_thw"][0].get<int64_t>());
    EXPECT_EQ(pixels->grid_thw[1], entry["grid_thw"][1].get<int64_t>());
    EXPECT_EQ(pixels->grid_thw[2], entry["grid_thw"][2].get<int64_t>());
    EXPECT_EQ(pixels->num_patches, entry["shape"][0].get<int64_t>());
    EXPECT_EQ(pixels->patch_dim, entry["shape"][1].get<int64_t>());
    expect_sampled_values_near(pixels->pixel_values, entry);
  }
}

TEST(ImagePreprocess, Gemma3EqualsTransformers) {
  ASSERT_FALSE(test::image_manifest()["gemma3"].empty());
  for (const auto& entry : test::image_manifest()["gemma3"]) {
    SCOPED_TRACE(entry["values"].get<std::string>());
    expect_sampled_values_near(preprocess_gemma3(test::decode_fixture(entry["source"])), entry);
  }
}

// The gemma3_vision model fixture's image at its tower's 56 x 56, against what transformers'
// Gemma3ImageProcessor gave for it (tools/reference/make_fixtures_multimodal.py): the same size,
// so the resize keeps every pixel and only the rescale and normalisation are compared.
TEST(ImagePreprocess, Gemma3AtTheVisionFixturesSizeEqualsTransformers) {
  for (const std::string name : {"image", "image2"}) {
    SCOPED_TRACE(name);
    const std::string values = name == "image" ? "pixel_values.f32" : "pixel_values2.f32";
    expect_values_near(preprocess_gemma3(test::decode_fixture("../gemma3_vision/" + name + ".png"), 56),
                       test::read_f32_fixture("../gemma3_vision/" + values));
  }
}

// The qwen3_vl model fixture's 96 x 64 image with Qwen3-VL's processor settings (16-pixel patches,
// mean and std 0.5, its preprocessor_config.json's bounds), against transformers' Qwen2VLImageProcessor
// with the same settings (tools/reference/make_fixtures_multimodal.py): the size is a multiple of 32,
// so the resize keeps every pixel and the patch order, rescale and normalisation are compared.
TEST(ImagePreprocess, Qwen3VlAtTheVisionFixturesSizeEqualsTransformers) {
  const std::vector<float> want = test::read_f32_fixture("../qwen3_vl/pixel_values.f32");
  Qwen2VlProcessorConfig config;
  config.patch_size = 16;
  config.min_pixels = 64 * 64;
  config.max_pixels = 32 * 32 * 64;
  config.image_mean = {0.5f, 0.5f, 0.5f};
  config.image_std = {0.5f, 0.5f, 0.5f};
  Result<Qwen2VlPixels> got = try_preprocess_qwen2_vl(test::decode_fixture("../qwen3_vl/image.png"), config);
  ASSERT_TRUE(got.ok()) << got.error().message;
  EXPECT_EQ(got->grid_thw, (std::array<int64_t, 3>{1, 4, 6}));
  expect_values_near(got->pixel_values, want);
  // image2.png, 64 x 64: also a multiple of 32.
  got = try_preprocess_qwen2_vl(test::decode_fixture("../qwen3_vl/image2.png"), config);
  ASSERT_TRUE(got.ok()) << got.error().message;
  EXPECT_EQ(got->grid_thw, (std::array<int64_t, 3>{1, 4, 4}));
  expect_values_near(got->pixel_values, test::read_f32_fixture("../qwen3_vl/pixel_values2.f32"));
}

// The qwen2_5_vl model fixture's images (image.png, 84 x 56, and image2.png, 56 x 56) with
// Qwen2.5-VL's settings (14-pixel patches, min_pixels 56 x 56, max_pixels 28 x 28 x 64:
// make_fixtures_multimodal.py's processor), against transformers' Qwen2VLImageProcessor: both sizes
// are multiples of 28, so the patch order, rescale and normalisation are compared.
TEST(ImagePreprocess, Qwen2VlFixtureImagesEqualTransformers) {
  Qwen2VlProcessorConfig config;
  config.min_pixels = 56 * 56;
  config.max_pixels = 28 * 28 * 64;
  const std::pair<const char*, std::array<int64_t, 3>> cases[] = {{"image", {1, 4, 6}}, {"image2", {1, 4, 4}}};
  for (const auto& [name, grid] : cases) {
    SCOPED_TRACE(name);
    Result<Qwen2VlPixels> got =
        try_preprocess_qwen2_vl(test::decode_fixture(std::string("../qwen2_5_vl/") + name + ".png"), config);
    ASSERT_TRUE(got.ok()) << got.error().message;
    EXPECT_EQ(got->grid_thw, grid);
    const std::string values = std::string(name) == "image" ? "pixel_values.f32" : "pixel_values2.f32";
    expect_values_near(got->pixel_values, test::read_f32_fixture("../qwen2_5_vl/" + values));
  }
}

TEST(ImagePreprocess, SmartResizeFollowsTransformers) {
  // Rounded to multiples of 28 (Python rounds half to even: 42 / 28 = 1.5 -> 2, 70 / 28 = 2.5 -> 2).
  EXPECT_EQ(*try_qwen2_vl_smart_resize(42, 70, 28, 56 * 56, 14 * 14 * 4 * 1280), (std::pair{56, 56}));
  // Brought under max_pixels with the aspect ratio kept.
  EXPECT_EQ(*try_qwen2_vl_smart_resize(2000, 3000, 28, 56 * 56, 14 * 14 * 4 * 1280), (std::pair{812, 1204}));
  // Raised over min_pixels.
  EXPECT_EQ(*try_qwen2_vl_smart_resize(20, 30, 28, 56 * 56, 14 * 14 * 4 * 1280), (std::pair{56, 84}));
  EXPECT_EQ(try_qwen2_vl_smart_resize(9, 30, 28, 56 * 56, 1003520).error().message,
            "image is 30x9; Qwen2-VL needs at least 10 pixels on each side");
  EXPECT_EQ(try_qwen2_vl_smart_resize(10, 2010, 28, 56 * 56, 1003520).error().message,
            "image is 2010x10; Qwen2-VL needs an aspect ratio of at most 200");
}

}  // namespace
}  // namespace deepinfer
