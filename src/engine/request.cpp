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
  std::vector<ImagePlaceholders> runs;
  for (const PromptImage& image : images_) runs.push_back({image.first_token, image.num_tokens, image.hash});
  cache_token_ids_ = image_cache_tokens(token_ids_, runs);
}

int32_t Request::chunk_end(int32_t begin, int32_t end) const {
  for (const PromptImage& image : images_) {
    if (image.bidirectional && image.first_token < end && end < image.end_token()) {
      return image.first_token > begin ? image.first_token : image.end_token();
    }
  }
  return end;
}

}  // namespace deepinfer
