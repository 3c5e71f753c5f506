// The vision processors of the supported multimodal families, reimplemented from transformers:
// resize (Pillow's filters, image/resize.h), rescale by 1/255 and normalise in float32, then the
// layout each vision tower reads.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "core/result.h"
#include "image/image.h"

namespace deepinfer {

// transformers' Qwen2VLImageProcessor (Qwen2-VL and Qwen2.5-VL) with its defaults.
struct Qwen2VlProcessorConfig {
  int32_t patch_size = 14;
  int32_t temporal_patch_size = 2;
  int32_t merge_size = 2;
  int64_t min_pixels = 56 * 56;
  int64_t max_pixels = 14 * 14 * 4 * 1280;
  std::array<float, 3> image_mean = {0.48145466f, 0.4578275f, 0.40821073f};  // OpenAI CLIP
  std::array<float, 3> image_std = {0.26862954f, 0.26130258f, 0.27577711f};
};

struct Qwen2VlPixels {
  // [num_patches, 3 * temporal_patch_size * patch_size * patch_size] float32; rows ordered by
  // (t, h / merge, w / merge, h % merge, w % merge), columns by (channel, t, y, x) within the patch.
  std::vector<float> pixel_values;
  int64_t num_patches = 0;
  int64_t patch_dim = 0;
  std::array<int64_t, 3> grid_thw = {};  // image_grid_thw: (1, height / patch, width / patch)
  int32_t resized_height = 0;
  int32_t resized_width = 0;
};

// smart_resize: (height, width) rounded to multiples of factor with the pixel count brought
// within [min_pixels, max_pixels], the aspect ratio kept as nearly as possible. An Error for an
// image under 10 pixels on a side or with an aspect ratio over 200, as transformers raises.
Result<std::pair<int32_t, int32_t>> try_qwen2_vl_smart_resize(int32_t height, int32_t width, int32_t factor,
                                                              int64_t min_pixels, int64_t max_pixels);

// The single image resized (bicubic) to smart_resize's size, rescaled, normalised and cut into
// patches; a still image fills both temporal slots with itself.
Result<Qwen2VlPixels> try_preprocess_qwen2_vl(const RgbImage& image, const Qwen2VlProcessorConfig& config = {});

// transformers' Gemma3ImageProcessor with its defaults (pan-and-scan off): bilinear resize to
// size x size, rescale, normalise with mean = std = 0.5. Returns [3, size, size] float32.
std::vector<float> preprocess_gemma3(const RgbImage& image, int32_t size = 896);

}  // namespace deepinfer
