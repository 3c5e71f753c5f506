// Images as the engine receives them: the formats it decodes (JPEG, PNG, WebP, GIF's first frame,
// each through its Debian library), found by their magic bytes, decoded to 8-bit RGB within a
// pixel-count limit that is checked from the header before any pixel is decoded.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "core/result.h"

namespace deepinfer {

enum class ImageFormat { kJpeg, kPng, kWebp, kGif };

// "JPEG", "PNG", "WebP", "GIF".
std::string_view image_format_name(ImageFormat format);
// "image/jpeg", "image/png", "image/webp", "image/gif".
std::string_view image_format_media_type(ImageFormat format);
// The format whose magic bytes begin data; nullopt for anything else.
std::optional<ImageFormat> find_image_format(std::span<const uint8_t> data);

// 8-bit RGB, row-major, no padding.
struct RgbImage {
  int32_t width = 0;
  int32_t height = 0;
  std::vector<uint8_t> pixels;  // [height, width, 3] uint8

  int64_t num_pixels() const { return int64_t{width} * height; }
};

// Pillow refuses images over 2 * 89478485 pixels; a server holds many decoded images at once, so
// the default allows 32 Mi pixels (96 MiB of RGB, e.g. 8192 x 4096). `deepinfer serve
// --max-image-pixels` sets another.
constexpr int64_t kDefaultMaxImagePixels = int64_t{32} * 1024 * 1024;

struct ImageDecodeOptions {
  int64_t max_pixels = kDefaultMaxImagePixels;
  // The media type the sender declared ("image/png"), empty when none was. The format is always
  // taken from the magic bytes; a declared type that names another format is an error.
  std::string_view declared_media_type;
};

// Decodes data to RGB as Pillow's Image.open(...).convert("RGB") does: alpha is dropped (not
// composited), grey is replicated into the three channels, palettes are looked up, 16-bit samples
// keep their high byte, only a GIF's or WebP's first frame is read (an animated WebP is refused).
// Every failure (empty, unknown or mismatched type, zero size, over max_pixels, truncated,
// corrupt) is an Error whose message names it; the libraries' error paths never unwind past a C++
// frame. Thread-safe.
Result<RgbImage> try_decode_image(std::span<const uint8_t> data, const ImageDecodeOptions& options = {});

}  // namespace deepinfer
