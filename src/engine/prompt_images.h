// Images of a prompt for a multimodal model: the checks a request's images pass on the way in, and
// the engine's cache of encodings by content hash, so the same pixels are encoded once.
#pragma once

#include <cstdint>
#include <list>
#include <memory>
#include <optional>
#include <span>
#include <utility>
#include <vector>

#include "core/result.h"
#include "core/sha256.h"
#include "engine/request.h"
#include "model/model.h"

namespace deepinfer {

// An image of a prompt (CausalLM::image_input): its tokens_per_image placeholders begin at
// first_token; pixels as the model's preprocessor made them; hash, when the caller has it, their
// SHA-256 (the API layer hashes on its own thread; the engine hashes what comes without one).
// file: the image's file as sent, which a request relayed to another process carries instead of
// the pixels (the worker preprocesses it again; a router, which holds no model, makes no pixels:
// recipe/api.h, ImageInputOptions::preprocess). rows: the encoder's output, when an image encoder
// service ran it already (ImageInputFormat::encoded_values of them; then no pixels, and hash is the
// one the service computed from its pixels, so the prefix cache names the image as when encoded
// here).
struct ImageInput {
  int32_t first_token = 0;
  std::vector<float> pixels;
  ImageGrid grid = {};  // the preprocessor's grid of patches (ImageInputFormat::tokens_for)
  std::optional<BlockHash> hash = std::nullopt;
  std::vector<uint8_t> file = {};
  std::vector<float> rows = {};
};

// The SHA-256 an image is known by: its hash when given, else of its grid and pixels (the same
// values cut into another grid are another image: a plain 448 x 224 image and a 224 x 448 one), or
// of its file when it has no pixels (a router's, which preprocesses nothing and names images only
// for its own prefix routing). Inline, so the API layer, whose fuzzers link no engine objects,
// hashes with it too.
inline BlockHash image_content_hash(const ImageInput& image) {
  if (image.hash) return *image.hash;
  if (image.pixels.empty()) return sha256(image.file);
  Sha256 hash;
  for (int32_t extent : {image.grid.frames, image.grid.rows, image.grid.columns}) {
    hash.update_u64le(static_cast<uint64_t>(static_cast<uint32_t>(extent)));
  }
  hash.update(image.pixels.data(), image.pixels.size() * sizeof(float));
  return hash.finish();
}

// Each image's placeholder run in prompt (from first_token, as long as prompt repeats that token)
// with its image_content_hash: what image_cache_tokens takes.
std::vector<ImagePlaceholders> image_placeholders(std::span<const int32_t> prompt,
                                                  const std::vector<ImageInput>& images);

class PromptImageCache {
 public:
  PromptImageCache(size_t capacity, size_t capacity_bytes) : capacity_(capacity), capacity_bytes_(capacity_bytes) {}
  // The images as the request's PromptImages, each sharing the encoding of an earlier request's
  // identical pixels while the cache holds it (capacity images, and capacity_bytes of pixels and
  // rows as each image came in, least recently sent first out; the newest always stays).
  // An image that comes encoded (ImageInput::rows) is ready as it is. Errors name the image:
  // placeholders that are not format's (or not where it says), overlapping or out-of-order images,
  // the wrong number of pixels or rows, placeholder tokens outside any image.
  Result<std::vector<PromptImage>> take(const std::vector<int32_t>& prompt, std::vector<ImageInput> images,
                                        const ImageInputFormat& format, int64_t hidden_size);

 private:
  struct Entry {
    BlockHash hash;
    std::shared_ptr<EncodedImage> image;
    size_t bytes = 0;
  };
  size_t capacity_;
  size_t capacity_bytes_;
  size_t bytes_ = 0;
  std::list<Entry> entries_;  // most recent first
};

}  // namespace deepinfer
