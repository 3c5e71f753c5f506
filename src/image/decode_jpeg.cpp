// JPEG through libjpeg-turbo with the settings Pillow decodes with (the library's defaults: islow
// DCT, fancy upsampling). libjpeg reports errors through error_exit, which must not return: it
// longjmps back to the function that called the library, which holds no objects with destructors.
// clang-format off
#include <cstddef>  // jpeglib.h uses size_t and FILE without declaring them
#include <cstdio>
#include <jpeglib.h>
#include <jerror.h>
// clang-format on

#include <csetjmp>
#include <memory>

#include "image/decoders.h"

namespace deepinfer::image_detail {
namespace {

struct JpegErrors {
  jpeg_error_mgr base;  // first, so libjpeg's pointer to it is a pointer to this
  std::jmp_buf jump;
  bool truncated;
  char message[JMSG_LENGTH_MAX];
};

// A progressive file can hold thousands of tiny scans, each a pass over the whole image: a few KB
// that take minutes to decode. Real encoders write about ten; libjpeg-turbo advises a cap.
constexpr int kMaxJpegScans = 1000;

void on_progress(j_common_ptr cinfo) {
  const auto* decompress = reinterpret_cast<j_decompress_ptr>(cinfo);
  if (decompress->input_scan_number <= kMaxJpegScans) return;
  auto* errors = reinterpret_cast<JpegErrors*>(cinfo->err);
  std::snprintf(errors->message, sizeof(errors->message), "more than %d scans", kMaxJpegScans);
  std::longjmp(errors->jump, 1);
}

[[noreturn]] void on_error_exit(j_common_ptr cinfo) {
  auto* errors = reinterpret_cast<JpegErrors*>(cinfo->err);
  errors->base.format_message(cinfo, errors->message);
  std::longjmp(errors->jump, 1);
}

// Warnings are not printed. The memory source answers reading past the end with a fake end-of-image
// marker and the JWRN_JPEG_EOF warning, which would decode a cut file into grey rows; Pillow calls
// such a file truncated, and so do we.
void on_emit_message(j_common_ptr cinfo, int msg_level) {
  auto* errors = reinterpret_cast<JpegErrors*>(cinfo->err);
  if (msg_level == -1 && errors->base.msg_code == JWRN_JPEG_EOF) {
    errors->truncated = true;
    std::longjmp(errors->jump, 1);
  }
}

bool create_jpeg_decoder(jpeg_decompress_struct* cinfo, JpegErrors* errors) {
  if (setjmp(errors->jump)) return false;
  jpeg_create_decompress(cinfo);
  return true;
}

bool read_jpeg_header(jpeg_decompress_struct* cinfo, JpegErrors* errors) {
  if (setjmp(errors->jump)) return false;
  jpeg_read_header(cinfo, TRUE);
  return true;
}

// Decodes every scanline into out ([height, width, output_components] uint8).
bool read_jpeg_scanlines(jpeg_decompress_struct* cinfo, JpegErrors* errors, uint8_t* out) {
  if (setjmp(errors->jump)) return false;
  jpeg_start_decompress(cinfo);
  const size_t row_bytes = size_t{cinfo->output_width} * cinfo->output_components;
  while (cinfo->output_scanline < cinfo->output_height) {
    JSAMPROW row = out + size_t{cinfo->output_scanline} * row_bytes;
    jpeg_read_scanlines(cinfo, &row, 1);
  }
  jpeg_finish_decompress(cinfo);
  return true;
}

}  // namespace

Result<RgbImage> decode_jpeg(std::span<const uint8_t> data, int64_t max_pixels) {
  jpeg_decompress_struct cinfo{};
  JpegErrors errors{};
  cinfo.err = jpeg_std_error(&errors.base);
  errors.base.error_exit = on_error_exit;
  errors.base.emit_message = on_emit_message;
  if (!create_jpeg_decoder(&cinfo, &errors)) return corrupt_image_error(ImageFormat::kJpeg, errors.message);
  const auto destroy = [](jpeg_decompress_struct* c) { jpeg_destroy_decompress(c); };
  const std::unique_ptr<jpeg_decompress_struct, decltype(destroy)> guard(&cinfo, destroy);
  jpeg_mem_src(&cinfo, data.data(), static_cast<unsigned long>(data.size()));
  jpeg_progress_mgr progress{};
  progress.progress_monitor = on_progress;
  cinfo.progress = &progress;

  const auto failure = [&]() -> Error {
    if (errors.truncated) return truncated_image_error(ImageFormat::kJpeg);
    return corrupt_image_error(ImageFormat::kJpeg, errors.message);
  };
  if (!read_jpeg_header(&cinfo, &errors)) return failure();
  DI_TRY(check_image_size(ImageFormat::kJpeg, cinfo.image_width, cinfo.image_height, max_pixels));
  if (cinfo.jpeg_color_space == JCS_GRAYSCALE) {
    cinfo.out_color_space = JCS_GRAYSCALE;
  } else if (cinfo.jpeg_color_space == JCS_YCbCr || cinfo.jpeg_color_space == JCS_RGB) {
    cinfo.out_color_space = JCS_RGB;
  } else {
    return Error{"JPEG image uses the CMYK/YCCK color space, which is not supported (send RGB or greyscale)"};
  }
  const int channels = cinfo.out_color_space == JCS_GRAYSCALE ? 1 : 3;
  RgbImage image{static_cast<int32_t>(cinfo.image_width), static_cast<int32_t>(cinfo.image_height), {}};
  image.pixels.resize(static_cast<size_t>(image.num_pixels()) * 3);
  if (!read_jpeg_scanlines(&cinfo, &errors, image.pixels.data())) return failure();
  if (channels == 1) {
    // Grey was written to the first third; spread it from the end so no value is overwritten early.
    for (size_t i = static_cast<size_t>(image.num_pixels()); i-- > 0;) {
      const uint8_t v = image.pixels[i];
      image.pixels[3 * i] = image.pixels[3 * i + 1] = image.pixels[3 * i + 2] = v;
    }
  }
  return image;
}

}  // namespace deepinfer::image_detail
