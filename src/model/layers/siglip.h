// Gemma 3's image encoder: a SigLIP vision transformer and Gemma 3's projector into the text model.
// The tower: the patch embedding (a convolution of stride = kernel, run as a product over the
// flattened patches), learned position embeddings, pre-norm encoder layers (LayerNorm, attention in
// which every patch sees every patch, LayerNorm, a GELU-tanh MLP; biases everywhere) and a final
// LayerNorm. The projector: average pooling of the patch grid down to mm_tokens_per_image rows,
// RMSNorm with (1 + w) weights, and a product into the text model's width.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "model/layers/linear.h"
#include "model/layers/vision_attention.h"
#include "model/model.h"

namespace deepinfer {

// The image encoder's tensors of a Gemma3ForConditionalGeneration checkpoint under "vision_tower."
// (the SigLIP tower's own names) and "multi_modal_projector.", whichever layout it was saved in:
// published checkpoints and transformers < 4.52 (vision_tower.vision_model.*), 4.52-4.57
// (model.vision_tower.vision_model.*), transformers 5 (vision_tower.*, no vision_model level).
Result<WeightStore> gemma3_vision_weights(const WeightStore& checkpoint);

class SiglipVisionTower {
 public:
  // The tower's tensors under prefix (e.g. "vision_tower.", gemma3_vision_weights' names).
  static Result<SiglipVisionTower> load(const ModelSource& source, const std::string& prefix,
                                        const VisionConfig& config);
  // pixels: [num_channels, image_size, image_size] float32 on the host, as the image processor gives
  // them; out: [num_patches, hidden] in the backend's memory (the last hidden state, after the
  // final LayerNorm).
  void forward(Backend& backend, const float* pixels, float* out) const;

 private:
  struct Layer {
    LayerNorm norm1, norm2;
    Linear q, k, v, out, fc1, fc2;
  };
  VisionConfig config_;
  Linear patch_embedding_;         // [hidden, num_channels * patch_size^2]
  kernels::WeightView positions_;  // [num_patches, hidden]
  std::vector<Layer> layers_;
  LayerNorm post_norm_;
  // What every call shares, made at load: the position ids 0..n-1, the patches as one sequence of
  // the tower's attention, and the ones gelu_tanh_mul multiplies by.
  DeviceBuffer patch_ids_, ones_;
  VisionAttentionBatch attention_;
  kernels::AttentionParams params_;
};

// Gemma3MultiModalProjector: the tower's [num_patches, vision hidden] rows to mm_tokens_per_image
// rows of the text model's width, the rows that stand in for an image's tokens.
class Gemma3Projector {
 public:
  static Result<Gemma3Projector> load(const ModelSource& source, const std::string& prefix, const VisionConfig& vision,
                                      int64_t text_hidden);
  int64_t tokens_per_image() const { return tokens_per_side_ * tokens_per_side_; }
  // patches: [num_patches, vision hidden]; out: [tokens_per_image, text hidden]; both backend memory.
  void forward(Backend& backend, const float* patches, float* out) const;

 private:
  int64_t patches_per_side_ = 0;
  int64_t tokens_per_side_ = 0;
  int64_t vision_hidden_ = 0;
  // [window^2, tokens]: for each offset in the pooling window, the patch row each token takes.
  DeviceBuffer pool_rows_;
  RmsNorm norm_;
  Linear projection_;  // mm_input_projection_weight transposed at load: [text hidden, vision hidden]
};

// Gemma 3's image encoder as its text model takes it: the tower, then the projector, rows to host.
class Gemma3ImageEncoder final : public ImageEncoder {
 public:
  // source: the checkpoint's tensors as gemma3_vision_weights names them; format: what its config
  // says images look like to the prompt (archs::gemma3_image_format).
  static Result<std::unique_ptr<Gemma3ImageEncoder>> load(const ModelSource& source, ImageInputFormat format);
  const ImageInputFormat& format() const override { return format_; }
  void encode(const float* pixels, const ImageGrid& grid, float* rows) override;

 private:
  Gemma3ImageEncoder(Backend& backend, SiglipVisionTower tower, Gemma3Projector projector, ImageInputFormat format,
                     int64_t text_hidden, int64_t vision_hidden, int64_t num_patches)
      : backend_(backend),
        tower_(std::move(tower)),
        projector_(std::move(projector)),
        format_(format),
        text_hidden_(text_hidden),
        vision_hidden_(vision_hidden),
        num_patches_(num_patches) {}

  Backend& backend_;
  std::shared_ptr<const WeightStore> weights_;  // keeps the mapped weights alive
  std::shared_ptr<WeightArena> arena_;          // keeps weights computed at load alive
  SiglipVisionTower tower_;
  Gemma3Projector projector_;
  ImageInputFormat format_;
  int64_t text_hidden_ = 0;
  int64_t vision_hidden_ = 0;
  int64_t num_patches_ = 0;
  bool rows_in_bf16_ = false;  // a bf16 checkpoint: the rows are rounded to bf16, as its embeddings
};

}  // namespace deepinfer
