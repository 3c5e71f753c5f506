// Qwen2-VL and Gemma 3 image preprocessing (see preprocess.h for the contract).
#include "image/preprocess.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "image/resize.h"

namespace deepinfer {
namespace {

// transformers rescales in float64 and stores float32, then normalises in float32.
float rescale_and_normalise(uint8_t value, float mean, float std) {
  const auto rescaled = static_cast<float>(static_cast<double>(value) * (1.0 / 255.0));
  return (rescaled - mean) / std;
}

// [3, height, width] float32 from an RGB image, rescaled and normalised per channel.
std::vector<float> to_normalised_planes(const RgbImage& image, const std::array<float, 3>& mean,
                                        const std::array<float, 3>& std) {
  const size_t num_pixels = static_cast<size_t>(image.num_pixels());
  std::vector<float> planes(3 * num_pixels);
  for (size_t i = 0; i < num_pixels; ++i) {
    for (int c = 0; c < 3; ++c)
      planes[c * num_pixels + i] = rescale_and_normalise(image.pixels[3 * i + c], mean[c], std[c]);
  }
  return planes;
}

}  // namespace

Result<std::pair<int32_t, int32_t>> try_qwen2_vl_smart_resize(int32_t height, int32_t width, int32_t factor,
                                                              int64_t min_pixels, int64_t max_pixels) {
  if (height < 10 || width < 10) {
    return Error{"image is " + std::to_string(width) + "x" + std::to_string(height) +
                 "; Qwen2-VL needs at least 10 pixels on each side"};
  }
  if (static_cast<double>(std::max(height, width)) / std::min(height, width) > 200) {
    return Error{"image is " + std::to_string(width) + "x" + std::to_string(height) +
                 "; Qwen2-VL needs an aspect ratio of at most 200"};
  }
  // Python's round() rounds half to even, as nearbyint does in the default rounding mode.
  const auto round_by = [&](double x) { return static_cast<int64_t>(std::nearbyint(x / factor)) * factor; };
  const auto floor_by = [&](double x) { return static_cast<int64_t>(std::floor(x / factor)) * factor; };
  const auto ceil_by = [&](double x) { return static_cast<int64_t>(std::ceil(x / factor)) * factor; };
  int64_t h_bar = round_by(height);
  int64_t w_bar = round_by(width);
  if (h_bar * w_bar > max_pixels) {
    const double beta = std::sqrt(static_cast<double>(height) * width / static_cast<double>(max_pixels));
    h_bar = floor_by(height / beta);
    w_bar = floor_by(width / beta);
  } else if (h_bar * w_bar < min_pixels) {
    const double beta = std::sqrt(static_cast<double>(min_pixels) / (static_cast<double>(height) * width));
    h_bar = ceil_by(height * beta);
    w_bar = ceil_by(width * beta);
  }
  return std::pair{static_cast<int32_t>(h_bar), static_cast<int32_t>(w_bar)};
}

Result<Qwen2VlPixels> try_preprocess_qwen2_vl(const RgbImage& image, const Qwen2VlProcessorConfig& config) {
  const int32_t patch = config.patch_size;
  const int32_t merge = config.merge_size;
  const int32_t temporal = config.temporal_patch_size;
  std::pair<int32_t, int32_t> size;
  DI_ASSIGN(size,
            try_qwen2_vl_smart_resize(image.height, image.width, patch * merge, config.min_pixels, config.max_pixels));
  const auto [height, width] = size;
  const RgbImage resized = resize_image(image, width, height, ResampleFilter::kBicubic);
  const std::vector<float> planes = to_normalised_planes(resized, config.image_mean, config.image_std);  // [3, h, w]

  Qwen2VlPixels out;
  out.resized_height = height;
  out.resized_width = width;
  const int64_t grid_h = height / patch;
  const int64_t grid_w = width / patch;
  out.grid_thw = {1, grid_h, grid_w};
  out.num_patches = grid_h * grid_w;
  out.patch_dim = int64_t{3} * temporal * patch * patch;
  out.pixel_values.resize(static_cast<size_t>(out.num_patches * out.patch_dim));
  const size_t plane_size = static_cast<size_t>(height) * width;
  float* dst = out.pixel_values.data();
  // Patches go merge window by merge window, so the merger's 2x2 neighbours are adjacent rows.
  for (int64_t block_y = 0; block_y < grid_h / merge; ++block_y) {
    for (int64_t block_x = 0; block_x < grid_w / merge; ++block_x) {
      for (int64_t in_y = 0; in_y < merge; ++in_y) {
        for (int64_t in_x = 0; in_x < merge; ++in_x) {
          const int64_t top = (block_y * merge + in_y) * patch;
          const int64_t left = (block_x * merge + in_x) * patch;
          for (int c = 0; c < 3; ++c) {
            for (int32_t t = 0; t < temporal; ++t) {  // the still image in every temporal slot
              for (int32_t y = 0; y < patch; ++y) {
                const float* src = planes.data() + c * plane_size + (top + y) * width + left;
                dst = std::copy(src, src + patch, dst);
              }
            }
          }
        }
      }
    }
  }
  return out;
}

std::vector<float> preprocess_gemma3(const RgbImage& image, int32_t size) {
  const RgbImage resized = resize_image(image, size, size, ResampleFilter::kBilinear);
  return to_normalised_planes(resized, {0.5f, 0.5f, 0.5f}, {0.5f, 0.5f, 0.5f});
}

}  // namespace deepinfer
