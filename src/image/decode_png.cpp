// PNG through libpng. libpng reports errors by longjmp, so the two functions that call it are kept
// free of objects with destructors (a longjmp skips them); buffers and the png_struct are owned by
// the calling frame, which the jump never crosses.
#include <png.h>

#include <algorithm>
#include <csetjmp>
#include <cstring>
#include <memory>

#include "image/decoders.h"

namespace deepinfer::image_detail {
namespace {

struct PngSource {
  const uint8_t* data = nullptr;
  size_t size = 0;
  size_t offset = 0;
  bool truncated = false;
  char message[192] = {};
};

void read_from_memory(png_structp png, png_bytep out, size_t length) {
  auto* source = static_cast<PngSource*>(png_get_io_ptr(png));
  if (length > source->size - source->offset) {
    source->truncated = true;
    png_error(png, "truncated");
  }
  std::memcpy(out, source->data + source->offset, length);
  source->offset += length;
}

[[noreturn]] void on_error(png_structp png, png_const_charp message) {
  auto* source = static_cast<PngSource*>(png_get_error_ptr(png));
  std::snprintf(source->message, sizeof(source->message), "%s", message);
  png_longjmp(png, 1);
}

void on_warning(png_structp, png_const_charp) {}  // Pillow reads past what libpng only warns about

struct PngHeader {
  png_uint_32 width = 0;
  png_uint_32 height = 0;
  size_t row_bytes = 0;
  int channels = 0;
  // 16-bit grey without alpha stays 16-bit: Pillow opens it as 32-bit integers ("I") and its
  // convert("RGB") clips each value to 255, where every other 16-bit kind keeps the high byte.
  // transformers and vLLM see Pillow's pixels, so the model does too.
  bool clipped_grey16 = false;
};

// Reads the header and sets the transformations to 8-bit grey / grey+alpha / RGB / RGBA, or 16-bit
// grey (no compositing: tRNS becomes an alpha channel that the caller drops, as Pillow's
// convert("RGB")).
bool read_png_header(png_structp png, png_infop png_info, PngHeader* header) {
  if (setjmp(png_jmpbuf(png))) return false;
  png_read_info(png, png_info);
  header->width = png_get_image_width(png, png_info);
  header->height = png_get_image_height(png, png_info);
  const int color_type = png_get_color_type(png, png_info);
  const int bit_depth = png_get_bit_depth(png, png_info);
  header->clipped_grey16 = bit_depth == 16 && color_type == PNG_COLOR_TYPE_GRAY;
  if (bit_depth == 16 && !header->clipped_grey16) png_set_strip_16(png);
  if (color_type == PNG_COLOR_TYPE_PALETTE) png_set_palette_to_rgb(png);
  if (color_type == PNG_COLOR_TYPE_GRAY && bit_depth < 8) png_set_expand_gray_1_2_4_to_8(png);
  png_set_interlace_handling(png);
  png_read_update_info(png, png_info);
  header->row_bytes = png_get_rowbytes(png, png_info);
  header->channels = png_get_channels(png, png_info);
  return true;
}

bool read_png_rows(png_structp png, png_bytepp rows) {
  if (setjmp(png_jmpbuf(png))) return false;
  png_read_image(png, rows);
  return true;
}

}  // namespace

Result<RgbImage> decode_png(std::span<const uint8_t> data, int64_t max_pixels) {
  PngSource source{data.data(), data.size()};
  png_structp png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &source, on_error, on_warning);
  if (png == nullptr) return corrupt_image_error(ImageFormat::kPng, "libpng could not start");
  png_infop png_info = png_create_info_struct(png);
  const auto destroy = [&](void*) {
    png_destroy_read_struct(&png, png_info != nullptr ? &png_info : nullptr, nullptr);
  };
  const std::unique_ptr<void, decltype(destroy)> guard(png, destroy);
  if (png_info == nullptr) return corrupt_image_error(ImageFormat::kPng, "libpng could not start");
  png_set_read_fn(png, &source, read_from_memory);
  // The pixel-count check below is ours (and names the flag); libpng's own limit is lower.
  png_set_user_limits(png, 0x7fffffff, 0x7fffffff);

  PngHeader header;
  const auto failure = [&]() -> Error {
    if (source.truncated) return truncated_image_error(ImageFormat::kPng);
    return corrupt_image_error(ImageFormat::kPng, source.message);
  };
  if (!read_png_header(png, png_info, &header)) return failure();
  DI_TRY(check_image_size(ImageFormat::kPng, header.width, header.height, max_pixels));
  const int channels = header.channels;
  const size_t sample_bytes = header.clipped_grey16 ? 2 : 1;
  if (channels < 1 || channels > 4 || header.row_bytes != size_t{header.width} * channels * sample_bytes) {
    return corrupt_image_error(ImageFormat::kPng, "unexpected row layout after libpng's conversions");
  }
  std::vector<uint8_t> decoded(header.row_bytes * header.height);  // [height, width, channels] samples
  std::vector<png_bytep> rows(header.height);
  for (png_uint_32 y = 0; y < header.height; ++y) rows[y] = decoded.data() + y * header.row_bytes;
  if (!read_png_rows(png, rows.data())) return failure();

  RgbImage image{static_cast<int32_t>(header.width), static_cast<int32_t>(header.height), {}};
  image.pixels.resize(static_cast<size_t>(image.num_pixels()) * 3);
  // Grey (1-2 channels) is replicated, alpha (channel 2 or 4) dropped.
  const bool grey = channels <= 2;
  for (size_t i = 0; i < static_cast<size_t>(image.num_pixels()); ++i) {
    uint8_t* out = image.pixels.data() + i * 3;
    if (header.clipped_grey16) {
      const uint8_t* in = decoded.data() + i * 2;  // big-endian
      out[0] = out[1] = out[2] = static_cast<uint8_t>(std::min(256 * in[0] + in[1], 255));
      continue;
    }
    const uint8_t* in = decoded.data() + i * channels;
    out[0] = in[0];
    out[1] = grey ? in[0] : in[1];
    out[2] = grey ? in[0] : in[2];
  }
  return image;
}

}  // namespace deepinfer::image_detail
