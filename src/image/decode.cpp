// Format detection by magic bytes, the declared-type check and the errors every decoder shares.
#include <algorithm>
#include <array>
#include <cctype>
#include <cstdio>
#include <string>

#include "image/decoders.h"
#include "image/image.h"

namespace deepinfer {
namespace {

struct FormatInfo {
  ImageFormat format;
  std::string_view name;
  std::string_view media_type;
};

constexpr std::array<FormatInfo, 4> kFormats = {{
    {ImageFormat::kJpeg, "JPEG", "image/jpeg"},
    {ImageFormat::kPng, "PNG", "image/png"},
    {ImageFormat::kWebp, "WebP", "image/webp"},
    {ImageFormat::kGif, "GIF", "image/gif"},
}};

const FormatInfo& info(ImageFormat format) { return kFormats[static_cast<size_t>(format)]; }

bool starts_with(std::span<const uint8_t> data, std::string_view prefix) {
  return data.size() >= prefix.size() && std::equal(prefix.begin(), prefix.end(), data.begin(),
                                                    [](char a, uint8_t b) { return static_cast<uint8_t>(a) == b; });
}

// The format whose magic bytes data is a proper prefix of: a file cut inside its signature.
std::optional<ImageFormat> find_truncated_signature(std::span<const uint8_t> data) {
  const std::array<std::pair<ImageFormat, std::string_view>, 5> signatures = {{
      {ImageFormat::kJpeg, std::string_view("\xFF\xD8\xFF", 3)},
      {ImageFormat::kPng, std::string_view("\x89PNG\r\n\x1A\n", 8)},
      {ImageFormat::kGif, "GIF87a"},
      {ImageFormat::kGif, "GIF89a"},
      {ImageFormat::kWebp, "RIFF"},
  }};
  for (const auto& [format, signature] : signatures) {
    if (data.size() < signature.size() && starts_with(std::span(data), signature.substr(0, data.size()))) {
      return format;
    }
  }
  // "RIFF" and a size but not yet "WEBP".
  if (data.size() >= 4 && data.size() < 12 && starts_with(data, "RIFF")) return ImageFormat::kWebp;
  return std::nullopt;
}

std::string lower_ascii(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

// The known format a declared media type names ("image/jpg" is a common alias of image/jpeg).
std::optional<ImageFormat> find_declared_format(std::string_view media_type) {
  const std::string lowered = lower_ascii(media_type);
  if (lowered == "image/jpg") return ImageFormat::kJpeg;
  for (const FormatInfo& f : kFormats) {
    if (lowered == f.media_type) return f.format;
  }
  return std::nullopt;
}

std::string hex_prefix(std::span<const uint8_t> data) {
  std::string out;
  for (size_t i = 0; i < std::min<size_t>(data.size(), 8); ++i) {
    char byte[4];
    std::snprintf(byte, sizeof(byte), "%s%02x", i == 0 ? "" : " ", data[i]);
    out += byte;
  }
  return out;
}

}  // namespace

std::string_view image_format_name(ImageFormat format) { return info(format).name; }
std::string_view image_format_media_type(ImageFormat format) { return info(format).media_type; }

std::optional<ImageFormat> find_image_format(std::span<const uint8_t> data) {
  if (starts_with(data, "\xFF\xD8\xFF")) return ImageFormat::kJpeg;
  if (starts_with(data, std::string_view("\x89PNG\r\n\x1A\n", 8))) return ImageFormat::kPng;
  if (starts_with(data, "GIF87a") || starts_with(data, "GIF89a")) return ImageFormat::kGif;
  if (starts_with(data, "RIFF") && starts_with(data.subspan(std::min<size_t>(data.size(), 8)), "WEBP")) {
    return ImageFormat::kWebp;
  }
  return std::nullopt;
}

Result<RgbImage> try_decode_image(std::span<const uint8_t> data, const ImageDecodeOptions& options) {
  if (data.empty()) return Error{"image data is empty"};
  const std::optional<ImageFormat> format = find_image_format(data);
  if (!format) {
    if (auto cut = find_truncated_signature(data)) return image_detail::truncated_image_error(*cut);
    return Error{"image data is not a JPEG, PNG, WebP or GIF file (it begins with bytes " + hex_prefix(data) + ")"};
  }
  if (!options.declared_media_type.empty()) {
    const std::optional<ImageFormat> declared = find_declared_format(options.declared_media_type);
    if (declared && *declared != *format) {
      return Error{"image data is " + std::string(image_format_name(*format)) + " but its declared media type is " +
                   std::string(options.declared_media_type)};
    }
  }
  switch (*format) {
    case ImageFormat::kJpeg:
      return image_detail::decode_jpeg(data, options.max_pixels);
    case ImageFormat::kPng:
      return image_detail::decode_png(data, options.max_pixels);
    case ImageFormat::kWebp:
      return image_detail::decode_webp(data, options.max_pixels);
    case ImageFormat::kGif:
      return image_detail::decode_gif(data, options.max_pixels);
  }
  return Error{"unknown image format"};
}

namespace image_detail {

Result<void> check_image_size(ImageFormat format, int64_t width, int64_t height, int64_t max_pixels) {
  const std::string name(image_format_name(format));
  if (width <= 0 || height <= 0) {
    return Error{name + " image has zero size (" + std::to_string(width) + "x" + std::to_string(height) + ")"};
  }
  // Both are below 2^31 in every format's header, so the product fits.
  if (width * height > max_pixels) {
    return Error{name + " image is " + std::to_string(width) + "x" + std::to_string(height) + " = " +
                 std::to_string(width * height) + " pixels, over the limit of " + std::to_string(max_pixels) +
                 " pixels (--max-image-pixels)"};
  }
  return {};
}

Error truncated_image_error(ImageFormat format) {
  return Error{"image data is truncated " + std::string(image_format_name(format)) + " (the file ends early)"};
}

Error corrupt_image_error(ImageFormat format, std::string_view detail) {
  return Error{"image data is corrupt " + std::string(image_format_name(format)) + ": " + std::string(detail)};
}

}  // namespace image_detail
}  // namespace deepinfer
