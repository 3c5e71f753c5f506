// The per-format decoders behind try_decode_image (image.h) and the errors they share. Internal to
// src/image/.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>

#include "core/result.h"
#include "image/image.h"

namespace deepinfer::image_detail {

// An Error unless 0 < width, 0 < height and width * height <= max_pixels; called with the size
// read from the header, before any pixel memory is allocated or decoded.
Result<void> check_image_size(ImageFormat format, int64_t width, int64_t height, int64_t max_pixels);
Error truncated_image_error(ImageFormat format);
Error corrupt_image_error(ImageFormat format, std::string_view detail);

// Each decodes one format whose magic bytes data begins with.
Result<RgbImage> decode_jpeg(std::span<const uint8_t> data, int64_t max_pixels);
Result<RgbImage> decode_png(std::span<const uint8_t> data, int64_t max_pixels);
Result<RgbImage> decode_webp(std::span<const uint8_t> data, int64_t max_pixels);
Result<RgbImage> decode_gif(std::span<const uint8_t> data, int64_t max_pixels);

}  // namespace deepinfer::image_detail
