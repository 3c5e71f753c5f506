// Qwen3-VL's tower, mergers and DeepStack mergers on the backend's ops. The whole image (each frame)
// is one sequence of the tower's attention (model/layers/vision_attention.h); the 2D rope and the
// patch embedding are Qwen2.5-VL's (model/layers/qwen2_vl_vision.h). The position embeddings are
// interpolated on the host: they depend on the grid alone.
#include "model/layers/qwen3_vl_vision.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/check.h"
#include "model/layers/qwen2_vl_vision.h"
#include "model/layers/vision_attention.h"
#include "runtime/device_upload.h"

namespace deepinfer {
namespace {

constexpr double kNormEps = 1e-6;  // transformers' LayerNorm(eps=1e-6) in every block and merger

// torch.linspace(0, end, steps) in float32: from the start for the first half, from the end for
// the rest.
std::vector<float> linspace(float end, int32_t steps) {
  std::vector<float> values(static_cast<size_t>(steps), 0.0f);
  if (steps == 1) return values;
  const float step = end / static_cast<float>(steps - 1);
  const int32_t half = steps / 2;
  for (int32_t i = 0; i < steps; ++i) {
    values[static_cast<size_t>(i)] =
        i < half ? static_cast<float>(i) * step : end - static_cast<float>(steps - 1 - i) * step;
  }
  return values;
}

Result<Linear> load_linear(const ModelSource& source, const std::string& name, int64_t out, int64_t in) {
  return Linear::load(source, name, out, in, /*bias=*/true);
}

}  // namespace

Result<std::unique_ptr<Qwen3VlImageEncoder>> Qwen3VlImageEncoder::load(const ModelSource& source,
                                                                       ImageInputFormat format) {
  DI_CHECK(
      source.config.qwen2_vl_vision.has_value() && source.config.qwen2_vl_vision->qwen3 && source.backend != nullptr,
      "Qwen3VlImageEncoder needs a Qwen3-VL vision_config");
  const Qwen2VlVisionConfig& c = *source.config.qwen2_vl_vision;
  const int64_t hidden = c.hidden_size;
  DI_TRY(check_qwen_vl_tower(source));
  if (c.hidden_act != "gelu_pytorch_tanh" && c.hidden_act != "gelu") {
    return Error{"vision_config: hidden_act '" + c.hidden_act +
                 "' is not supported (Qwen3-VL's tower runs gelu_pytorch_tanh or gelu)"};
  }
  const auto side = static_cast<int64_t>(std::llround(std::sqrt(static_cast<double>(c.num_position_embeddings))));
  if (c.num_position_embeddings <= 0 || side * side != c.num_position_embeddings) {
    return Error{"vision_config: num_position_embeddings " + std::to_string(c.num_position_embeddings) +
                 " is not a square grid of positions"};
  }
  for (size_t j = 0; j < c.deepstack_visual_indexes.size(); ++j) {
    const int64_t index = c.deepstack_visual_indexes[j];
    if (index >= c.depth ||
        std::count(c.deepstack_visual_indexes.begin(), c.deepstack_visual_indexes.end(), index) > 1) {
      return Error{"vision_config: deepstack_visual_indexes names block " + std::to_string(index) + " of " +
                   std::to_string(c.depth) + " twice or past the last"};
    }
  }
  std::unique_ptr<Qwen3VlImageEncoder> encoder(new Qwen3VlImageEncoder(*source.backend));
  encoder->weights_ = source.weights;
  encoder->arena_ = source.arena;
  encoder->config_ = c;
  encoder->format_ = format;
  encoder->tanh_gelu_ = c.hidden_act == "gelu_pytorch_tanh";
  encoder->position_side_ = static_cast<int32_t>(side);
  const std::string prefix = "visual.";

  auto patch_embedding = load_patch_embedding(source, prefix + "patch_embed.proj", c, /*bias=*/true);
  if (!patch_embedding.ok()) return patch_embedding.error();
  encoder->patch_embedding_ = *patch_embedding;
  auto positions = read_tensor_f32(source, prefix + "pos_embed.weight", {c.num_position_embeddings, hidden});
  if (!positions.ok()) return positions.error();
  encoder->position_embeddings_ = std::move(*positions);

  for (int64_t i = 0; i < c.depth; ++i) {
    const std::string block = prefix + "blocks." + std::to_string(i) + ".";
    auto norm1 = LayerNorm::load(source, block + "norm1", hidden, kNormEps);
    if (!norm1.ok()) return norm1.error();
    auto norm2 = LayerNorm::load(source, block + "norm2", hidden, kNormEps);
    if (!norm2.ok()) return norm2.error();
    auto attention = QwenVlAttention::load(source, block + "attn", hidden);
    if (!attention.ok()) return attention.error();
    auto fc1 = load_linear(source, block + "mlp.linear_fc1", c.intermediate_size, hidden);
    auto fc2 = load_linear(source, block + "mlp.linear_fc2", hidden, c.intermediate_size);
    for (const Result<Linear>* linear : {&fc1, &fc2}) {
      if (!linear->ok()) return linear->error();
    }
    encoder->blocks_.push_back({*norm1, *norm2, *attention, *fc1, *fc2});
  }
  const int64_t merged_width = hidden * c.spatial_merge_size * c.spatial_merge_size;
  const auto load_merger = [&](const std::string& name, int64_t norm_width) -> Result<Merger> {
    auto norm = LayerNorm::load(source, name + ".norm", norm_width, kNormEps);
    if (!norm.ok()) return norm.error();
    auto fc1 = load_linear(source, name + ".linear_fc1", merged_width, merged_width);
    if (!fc1.ok()) return fc1.error();
    auto fc2 = load_linear(source, name + ".linear_fc2", c.out_hidden_size, merged_width);
    if (!fc2.ok()) return fc2.error();
    return Merger{*norm, *fc1, *fc2};
  };
  auto merger = load_merger(prefix + "merger", hidden);
  if (!merger.ok()) return merger.error();
  encoder->merger_ = *merger;
  for (size_t j = 0; j < c.deepstack_visual_indexes.size(); ++j) {
    auto deepstack = load_merger(prefix + "deepstack_merger_list." + std::to_string(j), merged_width);
    if (!deepstack.ok()) return deepstack.error();
    encoder->deepstack_.push_back(*deepstack);
  }
  const std::optional<TensorView> fc2_stored = source.weights->find(prefix + "merger.linear_fc2.weight");
  encoder->rows_in_bf16_ = fc2_stored && fc2_stored->dtype == DType::kBF16;

  encoder->rope_ = VisionRope2d::upload(*source.backend, hidden / c.num_heads, c.rope_theta);
  encoder->params_ = vision_attention_params(
      hidden, c.num_heads, encoder->blocks_.empty() ? DType::kF32 : encoder->blocks_[0].attention.proj.weight.dtype);
  return encoder;
}

std::vector<float> Qwen3VlImageEncoder::position_rows(const ImageGrid& grid) const {
  const int64_t hidden = config_.hidden_size;
  const int32_t side = position_side_;
  const std::vector<float> ys = linspace(static_cast<float>(side - 1), grid.rows);
  const std::vector<float> xs = linspace(static_cast<float>(side - 1), grid.columns);
  // The grid's rows in row-major order first, as transformers builds them.
  std::vector<float> grid_rows(static_cast<size_t>(int64_t{grid.rows} * grid.columns * hidden));
  for (int32_t r = 0; r < grid.rows; ++r) {
    const auto y0 = static_cast<int32_t>(ys[static_cast<size_t>(r)]);
    const int32_t y1 = std::min(y0 + 1, side - 1);
    const float dy = ys[static_cast<size_t>(r)] - static_cast<float>(y0);
    for (int32_t col = 0; col < grid.columns; ++col) {
      const auto x0 = static_cast<int32_t>(xs[static_cast<size_t>(col)]);
      const int32_t x1 = std::min(x0 + 1, side - 1);
      const float dx = xs[static_cast<size_t>(col)] - static_cast<float>(x0);
      const int32_t corners[4] = {y0 * side + x0, y0 * side + x1, y1 * side + x0, y1 * side + x1};
      const float weights[4] = {(1 - dy) * (1 - dx), (1 - dy) * dx, dy * (1 - dx), dy * dx};
      float* out = grid_rows.data() + (int64_t{r} * grid.columns + col) * hidden;
      for (int64_t h = 0; h < hidden; ++h) {
        float sum = 0.0f;
        for (int k = 0; k < 4; ++k) {
          const float term = position_embeddings_[static_cast<size_t>(corners[k] * hidden + h)] * weights[k];
          sum = k == 0 ? term : sum + term;
        }
        out[h] = sum;
      }
    }
  }
  // Then in the processor's order: merge groups row-major, their patches row-major, every frame.
  const auto merge = static_cast<int32_t>(config_.spatial_merge_size);
  std::vector<int32_t> groups(static_cast<size_t>((grid.rows / merge) * (grid.columns / merge)));
  std::iota(groups.begin(), groups.end(), 0);
  std::vector<int32_t> rows, columns;
  merge_group_positions(grid, merge, groups, rows, columns);
  std::vector<float> ordered;
  ordered.reserve(static_cast<size_t>(int64_t{grid.frames} * grid.rows * grid.columns * hidden));
  for (int32_t f = 0; f < grid.frames; ++f) {
    for (size_t p = 0; p < rows.size(); ++p) {
      const float* row = grid_rows.data() + (int64_t{rows[p]} * grid.columns + columns[p]) * hidden;
      ordered.insert(ordered.end(), row, row + hidden);
    }
  }
  return ordered;
}

void Qwen3VlImageEncoder::merge(const Merger& merger, const float* x, int64_t groups, float* scratch, float* out) {
  Backend& backend = backend_;
  const int64_t width = merger.fc1.in_features;
  // The norm over each patch's row or over each group's: the same values either way laid out
  // [groups, width].
  merger.norm.forward(backend, x, groups * width / merger.norm.dim, scratch);
  float* hidden = scratch + groups * width;
  merger.fc1.forward(backend, scratch, groups, hidden);
  backend.gelu_mul(hidden, ones_.as<float>(), groups * width, hidden);
  merger.fc2.forward(backend, hidden, groups, out);
}

void Qwen3VlImageEncoder::encode(const float* pixels, const ImageGrid& grid, float* rows) {
  Backend& backend = backend_;
  const Qwen2VlVisionConfig& c = config_;
  const auto merge_size = static_cast<int32_t>(c.spatial_merge_size);
  const int32_t unit = merge_size * merge_size;
  const int64_t n = int64_t{grid.frames} * grid.rows * grid.columns;
  const int64_t groups = n / unit;
  const int64_t hidden = c.hidden_size;
  const int64_t patch_width = patch_embedding_.in_features;
  DI_CHECK(grid.rows % merge_size == 0 && grid.columns % merge_size == 0 && n > 0,
           "the grid is not whole merge groups");

  std::vector<int32_t> frame_groups(static_cast<size_t>(groups));
  std::iota(frame_groups.begin(), frame_groups.end(), 0);
  std::vector<int32_t> row_positions, column_positions;
  merge_group_positions(grid, merge_size, frame_groups, row_positions, column_positions);
  const VisionAttentionBatch whole = VisionAttentionBatch::make(
      backend, std::vector<int32_t>(static_cast<size_t>(grid.frames), grid.rows * grid.columns));
  const DeviceBuffer row_ids = upload_vector(backend, row_positions);
  const DeviceBuffer column_ids = upload_vector(backend, column_positions);

  const int64_t intermediate = c.intermediate_size;
  const int64_t merged_width = hidden * unit;
  const int64_t out_width = c.out_hidden_size;
  VisionTowerBuffers b(backend, n, hidden, whole.cache_rows());
  DeviceBuffer mlp = allocate_elements<float>(backend, std::max(n * intermediate, 2 * groups * merged_width));
  const int64_t num_sets = 1 + static_cast<int64_t>(deepstack_.size());
  DeviceBuffer merged = allocate_elements<float>(backend, num_sets * groups * out_width);
  const auto ones_count = static_cast<size_t>(std::max(n * intermediate, groups * merged_width));
  if (ones_.size_bytes() < ones_count * sizeof(float)) {
    ones_ = upload_vector(backend, std::vector<float>(ones_count, 1.0f));
  }
  float* x = b.x.as<float>();
  float* normed = b.normed.as<float>();
  float* delta = b.delta.as<float>();

  const DeviceBuffer patches = upload_vector(backend, std::vector<float>(pixels, pixels + n * patch_width));
  patch_embedding_.forward(backend, patches.as<float>(), n, x);
  const DeviceBuffer positions = upload_vector(backend, position_rows(grid));
  backend.add(x, positions.as<float>(), n * hidden, x);

  int64_t next_set = 1;
  for (size_t i = 0; i < blocks_.size(); ++i) {
    const Block& l = blocks_[i];
    l.norm1.forward(backend, x, n, normed);
    l.attention.forward(backend, normed, n, b, rope_, row_ids.as<int32_t>(), column_ids.as<int32_t>(), whole, params_,
                        delta);
    backend.add(x, delta, n * hidden, x);
    l.norm2.forward(backend, x, n, normed);
    l.fc1.forward(backend, normed, n, mlp.as<float>());
    if (tanh_gelu_) {
      backend.gelu_tanh_mul(mlp.as<float>(), ones_.as<float>(), n * intermediate, mlp.as<float>());
    } else {
      backend.gelu_mul(mlp.as<float>(), ones_.as<float>(), n * intermediate, mlp.as<float>());
    }
    l.fc2.forward(backend, mlp.as<float>(), n, delta);
    backend.add(x, delta, n * hidden, x);
    // DeepStack: this block's own merger, its rows in the order of the blocks that give them.
    const auto& indexes = c.deepstack_visual_indexes;
    const auto found = std::find(indexes.begin(), indexes.end(), static_cast<int64_t>(i));
    if (found != indexes.end()) {
      const auto j = static_cast<size_t>(found - indexes.begin());
      merge(deepstack_[j], x, groups, mlp.as<float>(), merged.as<float>() + next_set * groups * out_width);
      ++next_set;
    }
  }
  merge(merger_, x, groups, mlp.as<float>(), merged.as<float>());
  const int64_t count = num_sets * groups * out_width;
  backend.copy_to_host(rows, merged.data(), static_cast<size_t>(count) * sizeof(float));
  // transformers casts the image features to the text embeddings' dtype before it puts them in.
  if (rows_in_bf16_) {
    for (int64_t i = 0; i < count; ++i) rows[i] = bf16_to_f32(f32_to_bf16(rows[i]));
  }
}

}  // namespace deepinfer
