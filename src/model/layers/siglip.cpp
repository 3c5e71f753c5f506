// SigLIP's tower and Gemma 3's projector on the backend's ops. Attention where every patch sees
// every patch is the tower's attention over the patches as one sequence
// (model/layers/vision_attention.h, as Gemma 3's image tokens see each other in the text model).
#include "model/layers/siglip.h"

#include <cmath>
#include <numeric>

#include "core/check.h"
#include "runtime/device_upload.h"

namespace deepinfer {
namespace {

// The rows of one image's patches, [num_patches, channels * patch^2], each patch's values in the
// convolution weight's (channel, row, column) order; patches row-major over the grid.
std::vector<float> flattened_patches(const VisionConfig& c, const float* pixels) {
  const int64_t side = c.patches_per_side();
  const int64_t patch = c.patch_size;
  const int64_t row_width = c.num_channels * patch * patch;
  std::vector<float> rows(static_cast<size_t>(c.num_patches() * row_width));
  for (int64_t py = 0; py < side; ++py) {
    for (int64_t px = 0; px < side; ++px) {
      float* row = rows.data() + (py * side + px) * row_width;
      for (int64_t ch = 0; ch < c.num_channels; ++ch) {
        for (int64_t ky = 0; ky < patch; ++ky) {
          const float* line = pixels + (ch * c.image_size + py * patch + ky) * c.image_size + px * patch;
          std::copy(line, line + patch, row + (ch * patch + ky) * patch);
        }
      }
    }
  }
  return rows;
}

}  // namespace

Result<WeightStore> gemma3_vision_weights(const WeightStore& checkpoint) {
  return checkpoint.with_prefixes_renamed({{"model.vision_tower.vision_model.", "vision_tower."},
                                           {"vision_tower.vision_model.", "vision_tower."},
                                           {"model.vision_tower.", "vision_tower."},
                                           {"model.multi_modal_projector.", "multi_modal_projector."}});
}

Result<SiglipVisionTower> SiglipVisionTower::load(const ModelSource& source, const std::string& prefix,
                                                  const VisionConfig& config) {
  if (config.hidden_size % config.num_attention_heads != 0 || config.patches_per_side() < 1) {
    return Error{"vision_config: hidden_size " + std::to_string(config.hidden_size) + " over " +
                 std::to_string(config.num_attention_heads) + " attention heads, image_size " +
                 std::to_string(config.image_size) + " in patches of " + std::to_string(config.patch_size) +
                 ": the heads must divide the width and a patch fit the image"};
  }
  if (config.hidden_act != "gelu_pytorch_tanh" && config.hidden_act != "gelu_new") {
    return Error{"vision_config: hidden_act '" + config.hidden_act +
                 "' is not supported (SigLIP towers run the tanh GELU: gelu_pytorch_tanh)"};
  }
  SiglipVisionTower tower;
  tower.config_ = config;
  const int64_t hidden = config.hidden_size;
  const int64_t patch_width = config.num_channels * config.patch_size * config.patch_size;
  // The convolution's [hidden, channels, patch, patch] weight is the product's [hidden, patch_width].
  const std::string patch_name = prefix + "embeddings.patch_embedding";
  auto patch_weight = read_tensor_f32(source, patch_name + ".weight",
                                      {hidden, config.num_channels, config.patch_size, config.patch_size});
  if (!patch_weight.ok()) return patch_weight.error();
  auto patch_stored =
      source.weights->get(patch_name + ".weight", {hidden, config.num_channels, config.patch_size, config.patch_size});
  if (!patch_stored.ok()) return patch_stored.error();
  auto patch_view = load_host_tensor(source, patch_name + ".weight", hidden, patch_width, *patch_weight,
                                     host_rewrite_dtype(patch_stored->dtype));
  if (!patch_view.ok()) return patch_view.error();
  tower.patch_embedding_.weight = *patch_view;
  tower.patch_embedding_.in_features = patch_width;
  tower.patch_embedding_.out_features = hidden;
  auto patch_bias = load_tensor(source, patch_name + ".bias", {hidden});
  if (!patch_bias.ok()) return patch_bias.error();
  tower.patch_embedding_.bias = *patch_bias;
  auto positions = load_tensor(source, prefix + "embeddings.position_embedding.weight", {config.num_patches(), hidden});
  if (!positions.ok()) return positions.error();
  tower.positions_ = *positions;

  for (int64_t i = 0; i < config.num_hidden_layers; ++i) {
    const std::string layer = prefix + "encoder.layers." + std::to_string(i) + ".";
    Layer l;
    auto norm1 = LayerNorm::load(source, layer + "layer_norm1", hidden, config.layer_norm_eps);
    auto norm2 = LayerNorm::load(source, layer + "layer_norm2", hidden, config.layer_norm_eps);
    auto q = Linear::load(source, layer + "self_attn.q_proj", hidden, hidden, true);
    auto k = Linear::load(source, layer + "self_attn.k_proj", hidden, hidden, true);
    auto v = Linear::load(source, layer + "self_attn.v_proj", hidden, hidden, true);
    auto out = Linear::load(source, layer + "self_attn.out_proj", hidden, hidden, true);
    auto fc1 = Linear::load(source, layer + "mlp.fc1", config.intermediate_size, hidden, true);
    auto fc2 = Linear::load(source, layer + "mlp.fc2", hidden, config.intermediate_size, true);
    for (const Result<Linear>* linear : {&q, &k, &v, &out, &fc1, &fc2}) {
      if (!linear->ok()) return linear->error();
    }
    if (!norm1.ok()) return norm1.error();
    if (!norm2.ok()) return norm2.error();
    l.norm1 = *norm1;
    l.norm2 = *norm2;
    l.q = *q;
    l.k = *k;
    l.v = *v;
    l.out = *out;
    l.fc1 = *fc1;
    l.fc2 = *fc2;
    tower.layers_.push_back(std::move(l));
  }
  auto post = LayerNorm::load(source, prefix + "post_layernorm", hidden, config.layer_norm_eps);
  if (!post.ok()) return post.error();
  tower.post_norm_ = *post;

  Backend& backend = *source.backend;
  const int64_t n = config.num_patches();
  std::vector<int32_t> ids(static_cast<size_t>(n));
  std::iota(ids.begin(), ids.end(), 0);
  tower.patch_ids_ = upload_vector(backend, ids);
  tower.attention_ = VisionAttentionBatch::make(backend, {static_cast<int32_t>(n)});
  tower.ones_ = upload_vector(backend, std::vector<float>(static_cast<size_t>(n * config.intermediate_size), 1.0f));
  tower.params_ = vision_attention_params(hidden, config.num_attention_heads,
                                          tower.layers_.empty() ? DType::kF32 : tower.layers_[0].q.weight.dtype);
  return tower;
}

void SiglipVisionTower::forward(Backend& backend, const float* pixels, float* out) const {
  const VisionConfig& c = config_;
  const int64_t n = c.num_patches();
  const int64_t hidden = c.hidden_size;
  VisionTowerBuffers b(backend, n, hidden, attention_.cache_rows());
  DeviceBuffer mlp = allocate_elements<float>(backend, n * c.intermediate_size);
  float* x = b.x.as<float>();
  float* normed = b.normed.as<float>();
  float* delta = b.delta.as<float>();

  // Embeddings: the patches' product plus each patch's position row.
  const DeviceBuffer patches = upload_vector(backend, flattened_patches(c, pixels));
  patch_embedding_.forward(backend, patches.as<float>(), n, x);
  backend.embedding(positions_, patch_ids_.as<int32_t>(), n, delta);
  backend.add(x, delta, n * hidden, x);

  for (const Layer& l : layers_) {
    l.norm1.forward(backend, x, n, normed);
    backend.matmul_group(normed, n,
                         {{l.q.weight, l.q.bias, b.q.as<float>()},
                          {l.k.weight, l.k.bias, b.k.as<float>()},
                          {l.v.weight, l.v.bias, b.v.as<float>()}});
    attention_.attend(backend, b, params_);
    l.out.forward(backend, b.attended.as<float>(), n, delta);
    backend.add(x, delta, n * hidden, x);
    l.norm2.forward(backend, x, n, normed);
    l.fc1.forward(backend, normed, n, mlp.as<float>());
    backend.gelu_tanh_mul(mlp.as<float>(), ones_.as<float>(), n * c.intermediate_size, mlp.as<float>());
    l.fc2.forward(backend, mlp.as<float>(), n, delta);
    backend.add(x, delta, n * hidden, x);
  }
  post_norm_.forward(backend, x, n, out);
}

Result<Gemma3Projector> Gemma3Projector::load(const ModelSource& source, const std::string& prefix,
                                              const VisionConfig& vision, int64_t text_hidden) {
  Gemma3Projector projector;
  projector.patches_per_side_ = vision.patches_per_side();
  const auto tokens_per_side =
      static_cast<int64_t>(std::lround(std::sqrt(static_cast<double>(vision.mm_tokens_per_image))));
  if (tokens_per_side * tokens_per_side != vision.mm_tokens_per_image ||
      projector.patches_per_side_ % tokens_per_side != 0) {
    return Error{"mm_tokens_per_image (" + std::to_string(vision.mm_tokens_per_image) +
                 ") must be a square whose side divides the " + std::to_string(projector.patches_per_side_) +
                 " patches a side of the image"};
  }
  projector.tokens_per_side_ = tokens_per_side;
  projector.vision_hidden_ = vision.hidden_size;
  auto norm = RmsNorm::load(source, prefix + "mm_soft_emb_norm.weight", vision.hidden_size, vision.layer_norm_eps);
  if (!norm.ok()) return norm.error();
  projector.norm_ = *norm;
  projector.norm_.weight_offset = 1.0f;  // Gemma's (1 + w)
  // Stored as [vision hidden, text hidden] and applied as x W; the product wants W^T.
  const std::string name = prefix + "mm_input_projection_weight";
  auto stored = source.weights->get(name, {vision.hidden_size, text_hidden});
  if (!stored.ok()) return stored.error();
  auto weight = read_tensor_f32(source, name, {vision.hidden_size, text_hidden});
  if (!weight.ok()) return weight.error();
  std::vector<float> transposed(weight->size());
  for (int64_t r = 0; r < vision.hidden_size; ++r) {
    for (int64_t col = 0; col < text_hidden; ++col) {
      transposed[static_cast<size_t>(col * vision.hidden_size + r)] =
          (*weight)[static_cast<size_t>(r * text_hidden + col)];
    }
  }
  auto view =
      load_host_tensor(source, name, text_hidden, vision.hidden_size, transposed, host_rewrite_dtype(stored->dtype));
  if (!view.ok()) return view.error();
  projector.projection_.weight = *view;
  projector.projection_.in_features = vision.hidden_size;
  projector.projection_.out_features = text_hidden;
  // Window offset (dy, dx), row-major, then token t = (ty, tx): the patch row (ty w + dy, tx w + dx).
  const int64_t window = projector.patches_per_side_ / tokens_per_side;
  std::vector<int32_t> rows;
  for (int64_t dy = 0; dy < window; ++dy) {
    for (int64_t dx = 0; dx < window; ++dx) {
      for (int64_t t = 0; t < vision.mm_tokens_per_image; ++t) {
        const int64_t ty = t / tokens_per_side;
        const int64_t tx = t % tokens_per_side;
        rows.push_back(static_cast<int32_t>((ty * window + dy) * projector.patches_per_side_ + tx * window + dx));
      }
    }
  }
  projector.pool_rows_ = upload_vector(*source.backend, rows);
  return projector;
}

void Gemma3Projector::forward(Backend& backend, const float* patches, float* out) const {
  const int64_t tokens = tokens_per_image();
  const int64_t window = patches_per_side_ / tokens_per_side_;
  const int64_t hidden = vision_hidden_;
  DeviceBuffer pooled = allocate_elements<float>(backend, tokens * hidden);
  DeviceBuffer gathered = allocate_elements<float>(backend, tokens * hidden);
  // Average pooling as PyTorch sums a window: its patches in row-major order, then a scaling by
  // 1 / window^2 (exactly PyTorch's division for Gemma 3's 4 x 4 windows, a power of two).
  const kernels::WeightView table{patches, DType::kF32, patches_per_side_ * patches_per_side_, hidden};
  for (int64_t offset = 0; offset < window * window; ++offset) {
    float* target = offset == 0 ? pooled.as<float>() : gathered.as<float>();
    backend.embedding(table, pool_rows_.as<int32_t>() + offset * tokens, tokens, target);
    if (offset > 0) backend.add(pooled.as<float>(), target, tokens * hidden, pooled.as<float>());
  }
  backend.scale(pooled.as<float>(), tokens * hidden, 1.0f / static_cast<float>(window * window), pooled.as<float>());
  norm_.forward(backend, pooled.as<float>(), tokens, gathered.as<float>());
  projection_.forward(backend, gathered.as<float>(), tokens, out);
}

Result<std::unique_ptr<Gemma3ImageEncoder>> Gemma3ImageEncoder::load(const ModelSource& source,
                                                                     ImageInputFormat format) {
  DI_CHECK(source.config.vision.has_value() && source.backend != nullptr, "Gemma3ImageEncoder needs a vision_config");
  const VisionConfig& vision = *source.config.vision;
  auto tower = SiglipVisionTower::load(source, "vision_tower.", vision);
  if (!tower.ok()) return tower.error();
  auto projector = Gemma3Projector::load(source, "multi_modal_projector.", vision, source.config.hidden_size);
  if (!projector.ok()) return projector.error();
  DI_CHECK(format.image_size == vision.image_size && format.tokens_per_image == projector->tokens_per_image(),
           "the image format is not this encoder's");
  std::unique_ptr<Gemma3ImageEncoder> encoder(
      new Gemma3ImageEncoder(*source.backend, std::move(*tower), std::move(*projector), format,
                             source.config.hidden_size, vision.hidden_size, vision.num_patches()));
  encoder->weights_ = source.weights;
  encoder->arena_ = source.arena;
  const std::optional<TensorView> projection = source.weights->find("multi_modal_projector.mm_input_projection_weight");
  encoder->rows_in_bf16_ = projection && projection->dtype == DType::kBF16;
  return encoder;
}

void Gemma3ImageEncoder::encode(const float* pixels, const ImageGrid& /*grid*/, float* rows) {
  DeviceBuffer patches = allocate_elements<float>(backend_, num_patches_ * vision_hidden_);
  DeviceBuffer projected = allocate_elements<float>(backend_, int64_t{format_.tokens_per_image} * text_hidden_);
  tower_.forward(backend_, pixels, patches.as<float>());
  projector_.forward(backend_, patches.as<float>(), projected.as<float>());
  const int64_t count = int64_t{format_.tokens_per_image} * text_hidden_;
  backend_.copy_to_host(rows, projected.data(), static_cast<size_t>(count) * sizeof(float));
  // transformers casts the image features to the text embeddings' dtype before it puts them in.
  if (rows_in_bf16_) {
    for (int64_t i = 0; i < count; ++i) rows[i] = bf16_to_f32(f32_to_bf16(rows[i]));
  }
}

}  // namespace deepinfer
