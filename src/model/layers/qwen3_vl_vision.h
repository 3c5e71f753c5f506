// Qwen3-VL's image encoder: a vision transformer over the image's 16 x 16 patches (two frames deep:
// a still image fills both), its learned position embeddings interpolated to the image's grid, and
// the patch mergers into the text model's width. The tower: the patch embedding (a convolution of
// stride = kernel, run as a product, with a bias), blocks of LayerNorm, attention over the whole
// image with 2D rope (as Qwen2.5-VL's) and a GELU MLP, biases everywhere. The merger: LayerNorm,
// each 2 x 2 patch group side by side in one row, a two-layer MLP with the exact GELU. DeepStack:
// after each block of deepstack_visual_indexes a merger of its own (its LayerNorm over the whole
// group row) gives rows that the text model adds to the outputs of its first layers.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "model/layers/linear.h"
#include "model/layers/qwen2_vl_vision.h"
#include "model/model.h"

namespace deepinfer {

class Qwen3VlImageEncoder final : public ImageEncoder {
 public:
  // source: the checkpoint's tensors as qwen2_vl_vision_weights names them (visual.*), its config's
  // qwen2_vl_vision set with qwen3; format: archs::qwen_vl_image_format's.
  static Result<std::unique_ptr<Qwen3VlImageEncoder>> load(const ModelSource& source, ImageInputFormat format);
  const ImageInputFormat& format() const override { return format_; }
  // pixels: [grid patches, 3 * temporal_patch_size * patch_size^2] in the processor's row order;
  // rows: [1 + DeepStack layers, tokens_for(grid), text hidden], the merged tokens row-major over
  // the grid, the merger's rows first.
  void encode(const float* pixels, const ImageGrid& grid, float* rows) override;

 private:
  struct Block {
    LayerNorm norm1, norm2;
    QwenVlAttention attention;
    Linear fc1, fc2;
  };
  struct Merger {
    LayerNorm norm;  // over one patch's row (the final merger) or a whole group's (DeepStack's)
    Linear fc1, fc2;
  };
  explicit Qwen3VlImageEncoder(Backend& backend) : backend_(backend) {}
  // The learned position rows bilinearly interpolated to the grid ([patches, hidden], the
  // processor's row order), as transformers' fast_pos_embed_interpolate.
  std::vector<float> position_rows(const ImageGrid& grid) const;
  // merger over x's [groups, unit x hidden] rows into out ([groups, text hidden]); scratch holds
  // [groups, unit x hidden] twice.
  void merge(const Merger& merger, const float* x, int64_t groups, float* scratch, float* out);

  Backend& backend_;
  std::shared_ptr<const WeightStore> weights_;  // keeps the mapped weights alive
  std::shared_ptr<WeightArena> arena_;          // keeps weights computed at load alive
  Qwen2VlVisionConfig config_;
  ImageInputFormat format_;
  Linear patch_embedding_;
  std::vector<float> position_embeddings_;  // [num_position_embeddings, hidden], host
  int32_t position_side_ = 0;               // the square grid's side
  std::vector<Block> blocks_;
  Merger merger_;
  // deepstack_[j]: the merger after block config_.deepstack_visual_indexes[j].
  std::vector<Merger> deepstack_;
  VisionRope2d rope_;
  kernels::AttentionParams params_;
  bool tanh_gelu_ = true;      // the blocks' MLP: gelu_pytorch_tanh, else the exact GELU
  bool rows_in_bf16_ = false;  // a bf16 checkpoint: the rows are rounded to bf16, as its embeddings
  DeviceBuffer ones_;          // what the GELUs multiply by, as many as the largest image took
};

}  // namespace deepinfer
