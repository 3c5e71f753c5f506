// Image resizing exactly as Pillow's Image.resize does it for 8-bit RGB (libImaging/Resample.c's
// algorithm, reimplemented): a separable convolution, horizontal pass then vertical, whose filter
// support grows with the downscale factor (antialiasing), with 22-bit fixed-point coefficients and
// the sum rounded and clamped to 0..255 after each pass. The vision processors resize through it.
#pragma once

#include <cstdint>

#include "image/image.h"

namespace deepinfer {

enum class ResampleFilter {
  kBilinear,  // PIL.Image.BILINEAR: triangle, support 1
  kBicubic,   // PIL.Image.BICUBIC: Keys cubic with a = -0.5, support 2
};

// image resized to width x height (both > 0); a size equal to the input's is a copy.
RgbImage resize_image(const RgbImage& image, int32_t width, int32_t height, ResampleFilter filter);

}  // namespace deepinfer
