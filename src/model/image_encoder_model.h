// A multimodal checkpoint's image encoder on its own, without its text model or a KV cache: what
// an image encoder service runs (`deepinfer serve --role encoder`, docs/images.md).
#pragma once

#include <memory>
#include <string>

#include "model/model.h"

namespace deepinfer {

struct ImageEncoderModel {
  ModelConfig config;
  std::shared_ptr<ImageEncoder> encoder;
  // What the encoder's weights live in: the checkpoint's files and the weights made at load.
  std::shared_ptr<const WeightStore> weights;
  std::shared_ptr<WeightArena> arena;
  // The width of the rows the encoder writes: the text model's hidden size, whose embeddings the
  // rows stand in for (ImageInputFormat::encoded_values).
  int64_t row_width() const { return config.hidden_size; }
};

// Loads config.json and only the vision weights of dir onto the backend. Errors name the file,
// tensor or field, and a checkpoint whose architecture reads no images.
Result<ImageEncoderModel> load_image_encoder(const std::string& dir, Backend& backend, bool show_progress = true);

}  // namespace deepinfer
