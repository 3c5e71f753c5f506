// PromptImageCache: image checks and encodings shared by content hash.
#include "engine/prompt_images.h"

#include <algorithm>
#include <string>

namespace deepinfer {

std::vector<ImagePlaceholders> image_placeholders(std::span<const int32_t> prompt,
                                                  const std::vector<ImageInput>& images) {
  std::vector<ImagePlaceholders> runs;
  for (size_t i = 0; i < images.size(); ++i) {
    const ImageInput& image = images[i];
    const auto first = static_cast<size_t>(image.first_token);
    if (image.first_token < 0 || first >= prompt.size()) continue;
    // An image's run ends where the prompt stops repeating its first token or the next image begins.
    size_t limit = prompt.size();
    if (i + 1 < images.size() && images[i + 1].first_token > image.first_token) {
      limit = static_cast<size_t>(images[i + 1].first_token);
    }
    size_t end = first;
    while (end < limit && prompt[end] == prompt[first]) ++end;
    runs.push_back({image.first_token, static_cast<int32_t>(end - first), image_content_hash(image)});
  }
  return runs;
}

Result<std::vector<PromptImage>> PromptImageCache::take(const std::vector<int32_t>& prompt,
                                                        std::vector<ImageInput> images, const ImageInputFormat& format,
                                                        int64_t hidden_size) {
  const auto num_prompt = static_cast<int32_t>(prompt.size());
  std::vector<PromptImage> taken;
  int32_t previous_end = 0;
  int64_t placeholders = 0;
  for (size_t i = 0; i < images.size(); ++i) {
    ImageInput& input = images[i];
    const std::string name = "image " + std::to_string(i);
    const ImageGrid& grid = input.grid;
    // 2^15 patches a side keeps every count in int32 (the processor's max_pixels keeps real images
    // far below).
    constexpr int32_t kMaxPatchesPerSide = 1 << 15;
    if (format.tokens_per_image == 0 && (grid.frames != 1 || grid.rows <= 0 || grid.columns <= 0 ||
                                         grid.rows % format.merge_size != 0 || grid.columns % format.merge_size != 0 ||
                                         grid.rows > kMaxPatchesPerSide || grid.columns > kMaxPatchesPerSide)) {
      return Error{name + " has a grid of " + std::to_string(grid.frames) + " x " + std::to_string(grid.rows) + " x " +
                   std::to_string(grid.columns) + " patches; a still image is 1 x rows x columns, both " +
                   "multiples of the merge size " + std::to_string(format.merge_size) + " and at most " +
                   std::to_string(kMaxPatchesPerSide)};
    }
    const int32_t num_tokens = format.tokens_for(grid);
    const int64_t end = int64_t{input.first_token} + num_tokens;
    if (input.first_token < previous_end || end >= num_prompt) {
      return Error{name + " at prompt token " + std::to_string(input.first_token) +
                   " overlaps the image before it or does not end before the prompt's last token"};
    }
    for (int32_t t = input.first_token; t < end; ++t) {
      if (prompt[static_cast<size_t>(t)] != format.image_token_id) {
        return Error{name + ": prompt token " + std::to_string(t) + " is " +
                     std::to_string(prompt[static_cast<size_t>(t)]) + ", not the image placeholder " +
                     std::to_string(format.image_token_id) + " (this image takes " + std::to_string(num_tokens) +
                     " in a row)"};
      }
    }
    const int64_t num_pixels = format.pixel_count(grid);
    const bool encoded_elsewhere = !input.rows.empty();
    const int64_t num_values = format.encoded_values(grid, hidden_size);
    if (encoded_elsewhere && (!input.hash || static_cast<int64_t>(input.rows.size()) != num_values)) {
      return Error{name + " comes encoded with " + std::to_string(input.rows.size()) + " values" +
                   (input.hash ? "" : " and no hash") + "; this model takes " +
                   (format.deepstack_layers > 0 ? std::to_string(1 + format.deepstack_layers) + " x " : "") +
                   std::to_string(num_tokens) + " x " + std::to_string(hidden_size) + " for its grid, and its hash"};
    }
    if (!encoded_elsewhere && static_cast<int64_t>(input.pixels.size()) != num_pixels) {
      const std::string shape =
          format.preprocessor == ImageInputFormat::Preprocessor::kGemma3
              ? "3 x " + std::to_string(format.image_size) + " x " + std::to_string(format.image_size)
              : std::to_string(grid.frames) + " x " + std::to_string(grid.rows) + " x " + std::to_string(grid.columns) +
                    " patches of " + std::to_string(num_pixels / (int64_t{grid.frames} * grid.rows * grid.columns));
      return Error{name + " has " + std::to_string(input.pixels.size()) + " pixel values; the encoder takes " +
                   std::to_string(num_pixels) + " (" + shape + ")"};
    }
    previous_end = static_cast<int32_t>(end);
    placeholders += num_tokens;
    PromptImage image;
    image.first_token = input.first_token;
    image.num_tokens = num_tokens;
    image.bidirectional = format.bidirectional;
    image.num_sets = 1 + format.deepstack_layers;
    if (format.mrope) {
      image.mrope_rows = grid.rows / format.merge_size;
      image.mrope_columns = grid.columns / format.merge_size;
    }
    image.hash = image_content_hash(input);
    const auto found =
        std::find_if(entries_.begin(), entries_.end(), [&](const Entry& e) { return e.hash == image.hash; });
    if (found != entries_.end()) {
      entries_.splice(entries_.begin(), entries_, found);
    } else {
      auto encoded = std::make_shared<EncodedImage>();
      encoded->pixels = std::move(input.pixels);
      encoded->grid = grid;
      if (encoded_elsewhere) {
        encoded->rows = std::move(input.rows);
        encoded->ready.store(true);
      } else {
        encoded->rows.resize(static_cast<size_t>(num_values));
      }
      const size_t bytes = (encoded->pixels.size() + encoded->rows.size()) * sizeof(float);
      entries_.push_front({image.hash, std::move(encoded), bytes});
      bytes_ += bytes;
      while (entries_.size() > 1 && (entries_.size() > capacity_ || bytes_ > capacity_bytes_)) {
        bytes_ -= entries_.back().bytes;
        entries_.pop_back();
      }
    }
    image.image = entries_.front().image;
    taken.push_back(std::move(image));
  }
  const int64_t in_prompt = std::count(prompt.begin(), prompt.end(), format.image_token_id);
  if (in_prompt != placeholders) {
    return Error{"the prompt holds " + std::to_string(in_prompt) + " image placeholder tokens (" +
                 std::to_string(format.image_token_id) + ") but its " + std::to_string(images.size()) +
                 " images take " + std::to_string(placeholders)};
  }
  return taken;
}

}  // namespace deepinfer
