// Pillow's two-pass resampling of 8-bit images (see resize.h for the contract).
#include "image/resize.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/check.h"

namespace deepinfer {
namespace {

double bilinear_weight(double x) {
  x = std::abs(x);
  return x < 1.0 ? 1.0 - x : 0.0;
}

// Keys' cubic convolution kernel with a = -0.5, the form Pillow evaluates.
double bicubic_weight(double x) {
  constexpr double a = -0.5;
  x = std::abs(x);
  if (x < 1.0) return ((a + 2.0) * x - (a + 3.0)) * x * x + 1.0;
  if (x < 2.0) return (((x - 5.0) * x + 8.0) * x - 4.0) * a;
  return 0.0;
}

// The sums keep 2 bits of headroom above the 8-bit result for the filters' negative lobes.
constexpr int kPrecisionBits = 32 - 8 - 2;

// For each output sample along one axis: the first input index and the fixed-point weights of the
// inputs it covers.
struct AxisWeights {
  int32_t max_taps = 0;
  std::vector<int32_t> first;     // [out_size]
  std::vector<int32_t> num_taps;  // [out_size]
  std::vector<int32_t> weights;   // [out_size, max_taps], scaled by 2^kPrecisionBits
};

AxisWeights compute_axis_weights(int32_t in_size, int32_t out_size, ResampleFilter filter) {
  const double filter_support = filter == ResampleFilter::kBicubic ? 2.0 : 1.0;
  const auto weight = filter == ResampleFilter::kBicubic ? bicubic_weight : bilinear_weight;
  // Pillow passes the source box as floats; whole-image sizes are exact in float.
  const double scale = static_cast<double>(static_cast<float>(in_size)) / out_size;
  // Downscaling stretches the filter over scale input pixels, so every input contributes.
  const double filter_scale = std::max(scale, 1.0);
  const double support = filter_support * filter_scale;
  AxisWeights axis;
  axis.max_taps = static_cast<int32_t>(std::ceil(support)) * 2 + 1;
  axis.first.resize(out_size);
  axis.num_taps.resize(out_size);
  axis.weights.assign(static_cast<size_t>(out_size) * axis.max_taps, 0);
  std::vector<double> taps(axis.max_taps);
  // Pillow multiplies by the reciprocal; dividing could round the last bit differently.
  const double inverse_filter_scale = 1.0 / filter_scale;
  for (int32_t out = 0; out < out_size; ++out) {
    const double center = (out + 0.5) * scale;
    // Truncation toward zero, as Pillow's (int) cast; negative starts are clamped anyway.
    const int32_t first = std::max(static_cast<int32_t>(center - support + 0.5), 0);
    const int32_t last = std::min(static_cast<int32_t>(center + support + 0.5), in_size);
    const int32_t num_taps = last - first;
    double total = 0.0;
    for (int32_t i = 0; i < num_taps; ++i) {
      taps[i] = weight((i + first - center + 0.5) * inverse_filter_scale);
      total += taps[i];
    }
    for (int32_t i = 0; i < num_taps; ++i) {
      const double normalised = total != 0.0 ? taps[i] / total : taps[i];
      const double scaled = normalised * (1 << kPrecisionBits);
      axis.weights[static_cast<size_t>(out) * axis.max_taps + i] =
          static_cast<int32_t>(normalised < 0 ? scaled - 0.5 : scaled + 0.5);
    }
    axis.first[out] = first;
    axis.num_taps[out] = num_taps;
  }
  return axis;
}

// Rounds a fixed-point sum (it carries the +0.5 already) down to 8 bits, clamped to 0..255.
uint8_t to_u8(int32_t sum) { return static_cast<uint8_t>(std::clamp(sum >> kPrecisionBits, 0, 255)); }

// Resamples along x: in is [num_rows, in_width, 3], out [num_rows, out_width, 3].
void resample_rows(const uint8_t* in, int32_t in_width, int32_t num_rows, const AxisWeights& axis, int32_t out_width,
                   uint8_t* out) {
  for (int32_t y = 0; y < num_rows; ++y) {
    const uint8_t* row = in + static_cast<size_t>(y) * in_width * 3;
    for (int32_t x = 0; x < out_width; ++x) {
      const int32_t* w = &axis.weights[static_cast<size_t>(x) * axis.max_taps];
      int32_t sum[3] = {1 << (kPrecisionBits - 1), 1 << (kPrecisionBits - 1), 1 << (kPrecisionBits - 1)};
      for (int32_t i = 0; i < axis.num_taps[x]; ++i) {
        const uint8_t* pixel = row + static_cast<size_t>(axis.first[x] + i) * 3;
        for (int c = 0; c < 3; ++c) sum[c] += pixel[c] * w[i];
      }
      uint8_t* o = out + (static_cast<size_t>(y) * out_width + x) * 3;
      for (int c = 0; c < 3; ++c) o[c] = to_u8(sum[c]);
    }
  }
}

// Resamples along y: in is [in_rows, width, 3] starting at source row row_offset, out
// [out_height, width, 3].
void resample_columns(const uint8_t* in, int32_t width, int32_t row_offset, const AxisWeights& axis, int32_t out_height,
                      uint8_t* out) {
  const size_t row_bytes = static_cast<size_t>(width) * 3;
  for (int32_t y = 0; y < out_height; ++y) {
    const int32_t* w = &axis.weights[static_cast<size_t>(y) * axis.max_taps];
    const uint8_t* first_row = in + static_cast<size_t>(axis.first[y] - row_offset) * row_bytes;
    for (size_t i = 0; i < row_bytes; ++i) {
      int32_t sum = 1 << (kPrecisionBits - 1);
      for (int32_t t = 0; t < axis.num_taps[y]; ++t) sum += first_row[t * row_bytes + i] * w[t];
      out[static_cast<size_t>(y) * row_bytes + i] = to_u8(sum);
    }
  }
}

}  // namespace

RgbImage resize_image(const RgbImage& image, int32_t width, int32_t height, ResampleFilter filter) {
  DI_CHECK(width > 0 && height > 0 && image.width > 0 && image.height > 0, "resize to or from an empty image");
  const AxisWeights vertical = compute_axis_weights(image.height, height, filter);
  // Only the source rows some output row reads go through the horizontal pass.
  const int32_t first_row = vertical.first.front();
  const int32_t end_row = vertical.first.back() + vertical.num_taps.back();

  RgbImage horizontal_out;  // [end_row - first_row, width, 3] when resized along x
  const RgbImage* columns_in = &image;
  int32_t row_offset = 0;
  if (width != image.width) {
    const AxisWeights horizontal = compute_axis_weights(image.width, width, filter);
    horizontal_out = RgbImage{width, end_row - first_row, {}};
    horizontal_out.pixels.resize(static_cast<size_t>(horizontal_out.num_pixels()) * 3);
    resample_rows(image.pixels.data() + static_cast<size_t>(first_row) * image.width * 3, image.width,
                  end_row - first_row, horizontal, width, horizontal_out.pixels.data());
    columns_in = &horizontal_out;
    row_offset = first_row;
  }
  if (height == image.height) {
    // Without a vertical pass the horizontal one covered every row.
    return width != image.width ? horizontal_out : image;
  }
  RgbImage out{width, height, {}};
  out.pixels.resize(static_cast<size_t>(out.num_pixels()) * 3);
  resample_columns(columns_in->pixels.data(), width, row_offset, vertical, height, out.pixels.data());
  return out;
}

}  // namespace deepinfer
