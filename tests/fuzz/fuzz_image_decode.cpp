// libFuzzer target: arbitrary bytes as an image sent to the server (try_decode_image: JPEG, PNG,
// WebP, GIF through their libraries). Every input either decodes or returns an error; a decoded
// image holds width * height RGB pixels within the pixel limit.
#include <cstdint>
#include <cstdlib>
#include <span>

#include "image/image.h"

namespace {
volatile uint32_t g_sink = 0;
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace deepinfer;
  // A small limit keeps each run quick; the header check before decoding is what it exercises.
  constexpr int64_t kMaxPixels = int64_t{1} << 20;
  auto image = try_decode_image(std::span(data, size), {.max_pixels = kMaxPixels, .declared_media_type = {}});
  if (!image.ok()) {
    if (image.error().message.empty()) std::abort();
    return 0;
  }
  if (image->width <= 0 || image->height <= 0 || image->num_pixels() > kMaxPixels ||
      image->pixels.size() != static_cast<size_t>(image->num_pixels()) * 3) {
    std::abort();
  }
  g_sink = g_sink + image->pixels.front() + image->pixels.back();
  return 0;
}
