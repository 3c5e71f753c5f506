// Decoding against Pillow (Image.open(...).convert("RGB")) on the fixtures, and every kind of bad
// input: empty, unknown or mismatched type, zero size, truncated at several points, huge headers.
#include <gtest/gtest.h>

#include <string>

#include "image/image.h"
#include "image_fixtures.h"

namespace deepinfer {
namespace {

using test::decode_fixture;
using test::image_manifest;
using test::read_image_fixture;

std::string decode_error(std::span<const uint8_t> data, const ImageDecodeOptions& options = {}) {
  Result<RgbImage> image = try_decode_image(data, options);
  EXPECT_FALSE(image.ok());
  return image.ok() ? "" : image.error().message;
}

TEST(ImageDecode, EveryFixtureEqualsPillow) {
  ASSERT_FALSE(image_manifest()["decode"].empty());
  for (const auto& entry : image_manifest()["decode"]) {
    const std::string file = entry["file"];
    SCOPED_TRACE(file);
    const RgbImage image = decode_fixture(file);
    EXPECT_EQ(image.width, entry["width"].get<int32_t>());
    EXPECT_EQ(image.height, entry["height"].get<int32_t>());
    const std::vector<uint8_t> expected = read_image_fixture(entry["rgb"]);
    // Both sides run the same libjpeg-turbo, libpng and libwebp, so even JPEG and lossy WebP match bit for bit.
    ASSERT_EQ(image.pixels.size(), expected.size());
    size_t num_different = 0;
    for (size_t i = 0; i < expected.size(); ++i) num_different += image.pixels[i] != expected[i];
    EXPECT_EQ(num_different, 0u);
  }
}

TEST(ImageDecode, FindsTheFormatByMagicBytes) {
  EXPECT_EQ(find_image_format(read_image_fixture("rgb_37x53.png")), ImageFormat::kPng);
  EXPECT_EQ(find_image_format(read_image_fixture("progressive_64x40.jpg")), ImageFormat::kJpeg);
  EXPECT_EQ(find_image_format(read_image_fixture("lossy_37x53.webp")), ImageFormat::kWebp);
  EXPECT_EQ(find_image_format(read_image_fixture("palette_45x38.gif")), ImageFormat::kGif);
  const std::string riff_wave = "RIFF\x24\x00\x00\x00WAVEfmt ";
  EXPECT_EQ(find_image_format(std::span(reinterpret_cast<const uint8_t*>(riff_wave.data()), riff_wave.size())),
            std::nullopt);
}

TEST(ImageDecode, EmptyAndUnknownDataAreNamed) {
  EXPECT_EQ(decode_error({}), "image data is empty");
  const std::string html = "<html><body>not an image</body></html>";
  EXPECT_EQ(decode_error(std::span(reinterpret_cast<const uint8_t*>(html.data()), html.size())),
            "image data is not a JPEG, PNG, WebP or GIF file (it begins with bytes 3c 68 74 6d 6c 3e 3c 62)");
}

TEST(ImageDecode, DeclaredTypeMustMatchTheMagicBytes) {
  const std::vector<uint8_t> png = read_image_fixture("rgb_37x53.png");
  EXPECT_EQ(decode_error(png, {.max_pixels = kDefaultMaxImagePixels, .declared_media_type = "image/jpeg"}),
            "image data is PNG but its declared media type is image/jpeg");
  EXPECT_TRUE(try_decode_image(png, {.max_pixels = kDefaultMaxImagePixels, .declared_media_type = "image/png"}).ok());
  EXPECT_TRUE(try_decode_image(png, {.max_pixels = kDefaultMaxImagePixels, .declared_media_type = "IMAGE/PNG"}).ok());
  // A type that names no supported format (a generic one) leaves the magic bytes to decide.
  EXPECT_TRUE(
      try_decode_image(png, {.max_pixels = kDefaultMaxImagePixels, .declared_media_type = "application/octet-stream"})
          .ok());
  const std::vector<uint8_t> jpeg = read_image_fixture("progressive_64x40.jpg");
  EXPECT_TRUE(try_decode_image(jpeg, {.max_pixels = kDefaultMaxImagePixels, .declared_media_type = "image/jpg"}).ok());
  EXPECT_EQ(decode_error(jpeg, {.max_pixels = kDefaultMaxImagePixels, .declared_media_type = "image/webp"}),
            "image data is JPEG but its declared media type is image/webp");
}

TEST(ImageDecode, TruncatedFilesAreNamedAtEveryCut) {
  for (const auto& entry : image_manifest()["decode"]) {
    const std::string file = entry["file"];
    const std::vector<uint8_t> bytes = read_image_fixture(file);
    const std::string format(image_format_name(*find_image_format(bytes)));
    // Cuts inside the signature, inside the header and inside the pixel data.
    for (const size_t cut : {size_t{3}, size_t{20}, bytes.size() / 3, bytes.size() / 2, bytes.size() * 4 / 5}) {
      SCOPED_TRACE(file + " cut at " + std::to_string(cut));
      EXPECT_EQ(decode_error(std::span(bytes).first(cut)),
                "image data is truncated " + format + " (the file ends early)");
    }
  }
}

TEST(ImageDecode, HugeHeadersAreRefusedBeforeDecoding) {
  const std::pair<const char*, const char*> cases[] = {
      {"bomb_100000x100000.png", "PNG image is 100000x100000 = 10000000000 pixels"},
      {"bomb_65535x65535.gif", "GIF image is 65535x65535 = 4294836225 pixels"},
      {"bomb_65000x65000.jpg", "JPEG image is 65000x65000 = 4225000000 pixels"},
      {"bomb_16384x16384.webp", "WebP image is 16384x16384 = 268435456 pixels"},
  };
  for (const auto& [file, prefix] : cases) {
    SCOPED_TRACE(file);
    const std::string message = decode_error(read_image_fixture(file));
    EXPECT_EQ(message, std::string(prefix) + ", over the limit of " + std::to_string(kDefaultMaxImagePixels) +
                           " pixels (--max-image-pixels)");
  }
  // The limit is the caller's: 37 x 53 = 1961 pixels.
  const std::vector<uint8_t> png = read_image_fixture("rgb_37x53.png");
  EXPECT_TRUE(try_decode_image(png, {.max_pixels = 1961, .declared_media_type = {}}).ok());
  EXPECT_EQ(decode_error(png, {.max_pixels = 1960, .declared_media_type = {}}),
            "PNG image is 37x53 = 1961 pixels, over the limit of 1960 pixels (--max-image-pixels)");
}

TEST(ImageDecode, ZeroSizeIsNamed) {
  // The GIF bomb's header with a 0 x 0 logical screen.
  std::vector<uint8_t> gif = read_image_fixture("bomb_65535x65535.gif");
  std::fill(gif.begin() + 6, gif.begin() + 10, 0);
  EXPECT_EQ(decode_error(gif), "GIF image has zero size (0x0)");
}

TEST(ImageDecode, CorruptDataIsNamed) {
  std::vector<uint8_t> png = read_image_fixture("rgb_37x53.png");
  png[20] ^= 0xFF;  // inside IHDR, so its CRC no longer matches
  EXPECT_EQ(decode_error(png).rfind("image data is corrupt PNG: ", 0), 0u) << decode_error(png);
  std::vector<uint8_t> jpeg = read_image_fixture("progressive_64x40.jpg");
  jpeg[3] ^= 0xFF;  // the first segment's marker becomes 0x1f, which no JPEG defines
  EXPECT_EQ(decode_error(jpeg).rfind("image data is corrupt JPEG: ", 0), 0u) << decode_error(jpeg);
}

}  // namespace
}  // namespace deepinfer
