// GIF's first frame through giflib, placed on its logical screen as Pillow places it: the canvas
// starts as the frame's transparent index (else index 0), grows to hold a frame that overhangs it,
// and the indices go through the frame's local palette, else the global one, else grey.
#include <gif_lib.h>

#include <algorithm>
#include <cstring>
#include <memory>

#include "image/decoders.h"

namespace deepinfer::image_detail {
namespace {

struct GifSource {
  const uint8_t* data = nullptr;
  size_t size = 0;
  size_t offset = 0;
  bool truncated = false;
};

int read_from_memory(GifFileType* gif, GifByteType* out, int length) {
  auto* source = static_cast<GifSource*>(gif->UserData);
  const size_t available = source->size - source->offset;
  const size_t count = std::min(available, static_cast<size_t>(std::max(length, 0)));
  if (count < static_cast<size_t>(std::max(length, 0))) source->truncated = true;
  std::memcpy(out, source->data + source->offset, count);
  source->offset += count;
  return static_cast<int>(count);
}

struct GifCloser {
  void operator()(GifFileType* gif) const {
    int error = 0;
    DGifCloseFile(gif, &error);
  }
};

Error gif_error(const GifSource& source, int error_code) {
  if (source.truncated) return truncated_image_error(ImageFormat::kGif);
  const char* message = GifErrorString(error_code);
  return corrupt_image_error(ImageFormat::kGif, message != nullptr ? message : "giflib error");
}

// Skips extension blocks up to the first image descriptor, keeping the graphic control block's
// transparent index (-1: none).
Result<int> read_to_first_image(GifFileType* gif, const GifSource& source) {
  int transparent_index = -1;
  while (true) {
    GifRecordType record;
    if (DGifGetRecordType(gif, &record) == GIF_ERROR) return gif_error(source, gif->Error);
    if (record == IMAGE_DESC_RECORD_TYPE) return transparent_index;
    if (record == TERMINATE_RECORD_TYPE) return corrupt_image_error(ImageFormat::kGif, "the file holds no image");
    if (record != EXTENSION_RECORD_TYPE) continue;
    int code = 0;
    GifByteType* block = nullptr;
    if (DGifGetExtension(gif, &code, &block) == GIF_ERROR) return gif_error(source, gif->Error);
    // block[0] is the block's length; the graphic control block is flags, delay (2), index.
    if (code == GRAPHICS_EXT_FUNC_CODE && block != nullptr && block[0] >= 4 && (block[1] & 1) != 0) {
      transparent_index = block[4];
    }
    while (block != nullptr) {
      if (DGifGetExtensionNext(gif, &block) == GIF_ERROR) return gif_error(source, gif->Error);
    }
  }
}

}  // namespace

Result<RgbImage> decode_gif(std::span<const uint8_t> data, int64_t max_pixels) {
  GifSource source{data.data(), data.size()};
  int open_error = 0;
  std::unique_ptr<GifFileType, GifCloser> gif(DGifOpen(&source, read_from_memory, &open_error));
  if (gif == nullptr) return gif_error(source, open_error);
  DI_TRY(check_image_size(ImageFormat::kGif, gif->SWidth, gif->SHeight, max_pixels));
  int transparent_index = -1;
  DI_ASSIGN(transparent_index, read_to_first_image(gif.get(), source));
  if (DGifGetImageDesc(gif.get()) == GIF_ERROR) return gif_error(source, gif->Error);
  const GifImageDesc& frame = gif->Image;
  const int64_t width = std::max<int64_t>(gif->SWidth, int64_t{frame.Left} + frame.Width);
  const int64_t height = std::max<int64_t>(gif->SHeight, int64_t{frame.Top} + frame.Height);
  DI_TRY(check_image_size(ImageFormat::kGif, width, height, max_pixels));
  if (frame.Width <= 0 || frame.Height <= 0) return Error{"GIF image's first frame has zero size"};

  // [height, width] palette indices
  std::vector<GifPixelType> indices(static_cast<size_t>(width * height),
                                    static_cast<GifPixelType>(transparent_index >= 0 ? transparent_index : 0));
  std::vector<GifPixelType> line(static_cast<size_t>(frame.Width));
  // An interlaced frame stores rows 0, 8, 16, ..., then 4, 12, ..., then 2, 6, ..., then 1, 3, ...
  constexpr int kPassStart[] = {0, 4, 2, 1};
  constexpr int kPassStep[] = {8, 8, 4, 2};
  const int num_passes = frame.Interlace ? 4 : 1;
  for (int pass = 0; pass < num_passes; ++pass) {
    const int start = frame.Interlace ? kPassStart[pass] : 0;
    const int step = frame.Interlace ? kPassStep[pass] : 1;
    for (int y = start; y < frame.Height; y += step) {
      if (DGifGetLine(gif.get(), line.data(), frame.Width) == GIF_ERROR) return gif_error(source, gif->Error);
      std::copy(line.begin(), line.end(), indices.begin() + (int64_t{frame.Top} + y) * width + frame.Left);
    }
  }

  // Entries a short palette lacks stay grey, as in Pillow's palettes.
  uint8_t palette[256][3];
  for (int i = 0; i < 256; ++i) palette[i][0] = palette[i][1] = palette[i][2] = static_cast<uint8_t>(i);
  const ColorMapObject* color_map = frame.ColorMap != nullptr ? frame.ColorMap : gif->SColorMap;
  if (color_map != nullptr) {
    for (int i = 0; i < std::min(color_map->ColorCount, 256); ++i) {
      palette[i][0] = color_map->Colors[i].Red;
      palette[i][1] = color_map->Colors[i].Green;
      palette[i][2] = color_map->Colors[i].Blue;
    }
  }
  RgbImage image{static_cast<int32_t>(width), static_cast<int32_t>(height), {}};
  image.pixels.resize(indices.size() * 3);
  for (size_t i = 0; i < indices.size(); ++i) std::memcpy(&image.pixels[3 * i], palette[indices[i]], 3);
  return image;
}

}  // namespace deepinfer::image_detail
