// Resizing against Pillow's Image.resize (BICUBIC and BILINEAR): bit-exact at every size in the
// manifest (down by whole and fractional factors, up, one axis, mixed).
#include <gtest/gtest.h>

#include "image/resize.h"
#include "image_fixtures.h"

namespace deepinfer {
namespace {

TEST(ImageResize, EqualsPillowExactly) {
  ASSERT_FALSE(test::image_manifest()["resize"].empty());
  for (const auto& entry : test::image_manifest()["resize"]) {
    const std::string name = entry["rgb"];
    SCOPED_TRACE(name);
    const RgbImage source = test::decode_fixture(entry["source"]);
    const ResampleFilter filter = entry["filter"] == "bicubic" ? ResampleFilter::kBicubic : ResampleFilter::kBilinear;
    const RgbImage resized = resize_image(source, entry["width"], entry["height"], filter);
    EXPECT_EQ(resized.width, entry["width"].get<int32_t>());
    EXPECT_EQ(resized.height, entry["height"].get<int32_t>());
    const std::vector<uint8_t> expected = test::read_image_fixture(name);
    ASSERT_EQ(resized.pixels.size(), expected.size());
    size_t num_different = 0;
    for (size_t i = 0; i < expected.size(); ++i) num_different += resized.pixels[i] != expected[i];
    EXPECT_EQ(num_different, 0u);
  }
}

TEST(ImageResize, SameSizeIsACopy) {
  const RgbImage source = test::decode_fixture("rgb_37x53.png");
  EXPECT_EQ(resize_image(source, 37, 53, ResampleFilter::kBicubic).pixels, source.pixels);
}

}  // namespace
}  // namespace deepinfer
