// WebP (lossy, lossless, with or without alpha) through libwebp; animated WebP is refused.
#include <webp/decode.h>

#include <string>

#include "image/decoders.h"

namespace deepinfer::image_detail {
namespace {

Error webp_error(VP8StatusCode status) {
  if (status == VP8_STATUS_NOT_ENOUGH_DATA) return truncated_image_error(ImageFormat::kWebp);
  return corrupt_image_error(ImageFormat::kWebp, "libwebp status " + std::to_string(static_cast<int>(status)));
}

}  // namespace

Result<RgbImage> decode_webp(std::span<const uint8_t> data, int64_t max_pixels) {
  WebPDecoderConfig config;
  if (!WebPInitDecoderConfig(&config)) return corrupt_image_error(ImageFormat::kWebp, "libwebp version mismatch");
  const VP8StatusCode header_status = WebPGetFeatures(data.data(), data.size(), &config.input);
  if (header_status != VP8_STATUS_OK) return webp_error(header_status);
  if (config.input.has_animation) return Error{"animated WebP images are not supported (send a still image)"};
  DI_TRY(check_image_size(ImageFormat::kWebp, config.input.width, config.input.height, max_pixels));

  RgbImage image{config.input.width, config.input.height, {}};
  image.pixels.resize(static_cast<size_t>(image.num_pixels()) * 3);
  // Straight RGB out of an image with alpha is the RGBA decode with alpha dropped (not premultiplied).
  config.output.colorspace = MODE_RGB;
  config.output.is_external_memory = 1;
  config.output.u.RGBA.rgba = image.pixels.data();
  config.output.u.RGBA.stride = image.width * 3;
  config.output.u.RGBA.size = image.pixels.size();
  const VP8StatusCode status = WebPDecode(data.data(), data.size(), &config);
  WebPFreeDecBuffer(&config.output);
  if (status != VP8_STATUS_OK) return webp_error(status);
  return image;
}

}  // namespace deepinfer::image_detail
