// Qwen2.5-VL's image encoder: a vision transformer over the image's 14 x 14 patches (two frames
// deep: a still image fills both) and the patch merger into the text model's width.
// The tower: the patch embedding (a convolution of stride = kernel, run as a product over the
// flattened patches), blocks of RMSNorm, attention with 2D rope (each head's rotary half split
// between the patch's row and its column) and a SiLU-gated MLP, biases everywhere but the
// embedding. Most blocks attend within windows of window_size pixels (merged tokens grouped window
// by window), the fullatt_block_indexes blocks over the whole image. The merger: RMSNorm, each
// 2 x 2 patch group concatenated into one row, a two-layer MLP with the exact GELU between.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "model/layers/linear.h"
#include "model/layers/vision_attention.h"
#include "model/model.h"

namespace deepinfer {

// What the Qwen-VL towers (this one and Qwen3-VL's, qwen3_vl_vision.h) load and compute alike.
// What both towers' configs must be: a head width divisible by 4 (the 2D rope), RGB, and the merger's
// output as wide as the text model. Errors name the field.
Result<void> check_qwen_vl_tower(const ModelSource& source);

struct VisionRope2d;

// A block's attention: the checkpoint's stacked q|k|v (prefix.qkv, with biases) split in three,
// and the output product (prefix.proj).
struct QwenVlAttention {
  Linear q, k, v, proj;

  static Result<QwenVlAttention> load(const ModelSource& source, const std::string& prefix, int64_t width);
  // normed: [n, width]; b.q, b.k, b.v and b.attended take the step's values; out gets the output
  // product. rows, columns: each patch's place in the grid (the 2D rope); batch: which patches see
  // which.
  void forward(Backend& backend, const float* normed, int64_t n, VisionTowerBuffers& b, const VisionRope2d& rope,
               const int32_t* rows, const int32_t* columns, const VisionAttentionBatch& batch,
               const kernels::AttentionParams& params, float* out) const;
};
// The patch embedding (prefix.weight, a [hidden, 3, temporal, patch, patch] convolution of stride =
// kernel) as a product over the flattened patches, with prefix.bias when bias.
Result<Linear> load_patch_embedding(const ModelSource& source, const std::string& prefix, const Qwen2VlVisionConfig& c,
                                    bool bias);
// The 2D rope: the first quarter of each head's width in frequencies turned by the patch's row, the
// next by its column (transformers' VisionRotaryEmbedding(head_dim / 2)). Run as the rope op twice,
// with a frequency table zero outside the row's part, then the column's: a zero frequency leaves
// its pair as it is.
struct VisionRope2d {
  DeviceBuffer row_inv_freq, column_inv_freq;  // [head_dim / 2] each

  static VisionRope2d upload(Backend& backend, int64_t head_dim, double theta);
  // Rotates q and k ([n, heads * head_dim]) by each patch's row and column.
  void apply(Backend& backend, float* q, float* k, const int32_t* rows, const int32_t* columns, int64_t n,
             int32_t heads, int32_t head_dim) const;
};
// Each patch's row and column in the grid for the merge groups (indexes in row-major order of
// groups), in order, the merge x merge patches of a group row-major: the processor's row order.
void merge_group_positions(const ImageGrid& grid, int32_t merge, const std::vector<int32_t>& groups,
                           std::vector<int32_t>& rows, std::vector<int32_t>& columns);

// The encoder's tensors of a Qwen2_5_VLForConditionalGeneration checkpoint under "visual." in
// every layout transformers has saved it: published checkpoints and transformers 5 (visual.*),
// 4.52-4.57 (model.visual.*).
Result<WeightStore> qwen2_vl_vision_weights(const WeightStore& checkpoint);

class Qwen2VlImageEncoder final : public ImageEncoder {
 public:
  // source: the checkpoint's tensors as qwen2_vl_vision_weights names them, its config's
  // qwen2_vl_vision set; format: archs::qwen_vl_image_format's.
  static Result<std::unique_ptr<Qwen2VlImageEncoder>> load(const ModelSource& source, ImageInputFormat format);
  const ImageInputFormat& format() const override { return format_; }
  // pixels: [grid patches, 3 * temporal_patch_size * patch_size^2] in the processor's row order
  // (merge groups of 2 x 2 patches together, groups row-major); rows: [tokens_for(grid), text
  // hidden], the merged tokens row-major over the grid.
  void encode(const float* pixels, const ImageGrid& grid, float* rows) override;

 private:
  struct Block {
    RmsNorm norm1, norm2;
    QwenVlAttention attention;
    Linear gate, up, down;
  };
  explicit Qwen2VlImageEncoder(Backend& backend) : backend_(backend) {}

  Backend& backend_;
  std::shared_ptr<const WeightStore> weights_;  // keeps the mapped weights alive
  std::shared_ptr<WeightArena> arena_;          // keeps weights computed at load alive
  Qwen2VlVisionConfig config_;
  ImageInputFormat format_;
  Linear patch_embedding_;  // [hidden, 3 * temporal_patch_size * patch_size^2], no bias
  std::vector<Block> blocks_;
  std::vector<bool> full_attention_;  // per block
  RmsNorm merger_norm_;
  Linear merger_fc1_, merger_fc2_;
  VisionRope2d rope_;
  kernels::AttentionParams params_;
  bool rows_in_bf16_ = false;  // a bf16 checkpoint: the rows are rounded to bf16, as its embeddings
  DeviceBuffer ones_;          // what the merger's gelu_mul multiplies by, as many as the largest image took
};

}  // namespace deepinfer
