// Request's images: the prefix cache's stand-in ids for their placeholders, and where a prefill
// chunk may end around them.
#include "engine/request.h"

namespace deepinfer {

void Request::set_images(std::vector<PromptImage> images) {
  int32_t previous_end = 0;
  for (const PromptImage& image : images) {
    DI_CHECK(image.num_tokens > 0 && image.first_token >= previous_end && image.end_token() < num_prompt_tokens_ &&
                 image.image != nullptr,
             "image at tokens " << image.first_token << " + " << image.num_tokens
                                << " is not inside the prompt (before its last token) after the image before it");
    previous_end = image.end_token();
  }
  images_ = std::move(images);
  cache_token_ids_.clear();
  if (images_.empty()) return;
  cache_token_ids_ = token_ids_;
  for (const PromptImage& image : images_) {
    for (int32_t i = 0; i < image.num_tokens; ++i) {
      // 30 bits of the hash per token, a different 4 bytes for each of eight neighbours, and the
      // token's index in the image: any block holding part of an image carries that part's place
      // and, from eight tokens on, 240 of the hash's 256 bits. Below kPendingToken, so never a token id.
      uint32_t word = 0;
      for (int b = 0; b < 4; ++b) {
        word |= static_cast<uint32_t>(image.hash[static_cast<size_t>((4 * i + b) % 32)]) << (8 * b);
      }
      const uint32_t mixed = (word ^ (static_cast<uint32_t>(i) * 0x9e3779b1u)) & 0x3fffffffu;
      cache_token_ids_[static_cast<size_t>(image.first_token + i)] = -2 - static_cast<int32_t>(mixed);
    }
  }
}

int32_t Request::chunk_end(int32_t begin, int32_t end) const {
  for (const PromptImage& image : images_) {
    if (image.first_token < end && end < image.end_token()) {
      return image.first_token > begin ? image.first_token : image.end_token();
    }
  }
  return end;
}

}  // namespace deepinfer
