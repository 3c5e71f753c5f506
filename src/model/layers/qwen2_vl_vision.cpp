// Qwen2.5-VL's tower and merger on the backend's ops. A window (or the whole image) is a sequence
// of the tower's attention (model/layers/vision_attention.h). The 2D rope
// is the rope op run twice, once with the row positions and a frequency table zero outside the
// row's part, once with the columns': a zero frequency leaves its pair as it is.
#include "model/layers/qwen2_vl_vision.h"

#include <algorithm>
#include <array>
#include <cmath>

#include "core/check.h"
#include "model/layers/vision_attention.h"
#include "runtime/device_upload.h"

namespace deepinfer {
namespace {

// The processor's rows are merge groups (2 x 2 patches) in row-major order of groups. The tower
// runs them window by window: window_groups lists the groups in that order (transformers'
// window_index), window_lengths each window's patch count.
struct WindowOrder {
  std::vector<int32_t> window_groups;
  std::vector<int32_t> window_lengths;
};

WindowOrder window_order(const ImageGrid& grid, int32_t merge, int32_t groups_per_window) {
  const int32_t group_rows = grid.rows / merge;
  const int32_t group_columns = grid.columns / merge;
  WindowOrder order;
  for (int32_t f = 0; f < grid.frames; ++f) {
    for (int32_t wy = 0; wy < group_rows; wy += groups_per_window) {
      for (int32_t wx = 0; wx < group_columns; wx += groups_per_window) {
        int32_t count = 0;
        for (int32_t r = wy; r < std::min(wy + groups_per_window, group_rows); ++r) {
          for (int32_t c = wx; c < std::min(wx + groups_per_window, group_columns); ++c) {
            order.window_groups.push_back((f * group_rows + r) * group_columns + c);
            ++count;
          }
        }
        order.window_lengths.push_back(count * merge * merge);
      }
    }
  }
  return order;
}

}  // namespace

Result<void> check_qwen_vl_tower(const ModelSource& source) {
  const Qwen2VlVisionConfig& c = *source.config.qwen2_vl_vision;
  if (c.hidden_size % c.num_heads != 0 || (c.hidden_size / c.num_heads) % 4 != 0) {
    return Error{"vision_config: hidden_size " + std::to_string(c.hidden_size) + " over " +
                 std::to_string(c.num_heads) +
                 " heads must give a head width divisible by 4 (2D rope splits each rotary half in two)"};
  }
  if (c.in_channels != 3) return Error{"vision_config: in_channels must be 3 (RGB)"};
  if (c.out_hidden_size != source.config.hidden_size) {
    return Error{"vision_config: out_hidden_size " + std::to_string(c.out_hidden_size) +
                 " is not the text model's hidden_size " + std::to_string(source.config.hidden_size)};
  }
  return {};
}

Result<QwenVlAttention> QwenVlAttention::load(const ModelSource& source, const std::string& prefix, int64_t width) {
  const std::string qkv = prefix + ".qkv";
  auto weight = read_tensor_f32(source, qkv + ".weight", {3 * width, width});
  if (!weight.ok()) return weight.error();
  auto bias = read_tensor_f32(source, qkv + ".bias", {3 * width});
  if (!bias.ok()) return bias.error();
  auto stored = source.weights->get(qkv + ".weight", {3 * width, width});
  if (!stored.ok()) return stored.error();
  const DType dtype = host_rewrite_dtype(stored->dtype);
  QwenVlAttention attention;
  Linear* parts[] = {&attention.q, &attention.k, &attention.v};
  const char* names[] = {"q", "k", "v"};
  for (size_t i = 0; i < 3; ++i) {
    const auto rows = static_cast<ptrdiff_t>(width * width);
    const std::vector<float> w(weight->begin() + static_cast<ptrdiff_t>(i) * rows,
                               weight->begin() + static_cast<ptrdiff_t>(i + 1) * rows);
    const std::vector<float> b(bias->begin() + static_cast<ptrdiff_t>(i) * width,
                               bias->begin() + static_cast<ptrdiff_t>(i + 1) * width);
    const std::string name = qkv + "[" + names[i] + "]";
    auto w_view = load_host_tensor(source, name + ".weight", width, width, w, dtype);
    if (!w_view.ok()) return w_view.error();
    auto b_view = load_host_tensor(source, name + ".bias", 0, width, b, dtype);
    if (!b_view.ok()) return b_view.error();
    parts[i]->weight = *w_view;
    parts[i]->bias = *b_view;
    parts[i]->in_features = width;
    parts[i]->out_features = width;
  }
  auto proj = Linear::load(source, prefix + ".proj", width, width, /*bias=*/true);
  if (!proj.ok()) return proj.error();
  attention.proj = *proj;
  return attention;
}

void QwenVlAttention::forward(Backend& backend, const float* normed, int64_t n, VisionTowerBuffers& b,
                              const VisionRope2d& rope, const int32_t* rows, const int32_t* columns,
                              const VisionAttentionBatch& batch, const kernels::AttentionParams& params,
                              float* out) const {
  backend.matmul_group(
      normed, n,
      {{q.weight, q.bias, b.q.as<float>()}, {k.weight, k.bias, b.k.as<float>()}, {v.weight, v.bias, b.v.as<float>()}});
  rope.apply(backend, b.q.as<float>(), b.k.as<float>(), rows, columns, n, params.num_heads, params.head_dim);
  batch.attend(backend, b, params);
  proj.forward(backend, b.attended.as<float>(), n, out);
}

Result<Linear> load_patch_embedding(const ModelSource& source, const std::string& prefix, const Qwen2VlVisionConfig& c,
                                    bool bias) {
  const int64_t hidden = c.hidden_size;
  const int64_t patch_width = 3 * c.temporal_patch_size * c.patch_size * c.patch_size;
  const std::string name = prefix + ".weight";
  const std::vector<int64_t> shape = {hidden, 3, c.temporal_patch_size, c.patch_size, c.patch_size};
  auto weight = read_tensor_f32(source, name, shape);
  if (!weight.ok()) return weight.error();
  auto stored = source.weights->get(name, shape);
  if (!stored.ok()) return stored.error();
  auto view = load_host_tensor(source, name, hidden, patch_width, *weight, host_rewrite_dtype(stored->dtype));
  if (!view.ok()) return view.error();
  Linear embedding;
  embedding.weight = *view;
  embedding.in_features = patch_width;
  embedding.out_features = hidden;
  if (bias) {
    auto values = read_tensor_f32(source, prefix + ".bias", {hidden});
    if (!values.ok()) return values.error();
    auto bias_view = load_host_tensor(source, prefix + ".bias", 0, hidden, *values, host_rewrite_dtype(stored->dtype));
    if (!bias_view.ok()) return bias_view.error();
    embedding.bias = *bias_view;
  }
  return embedding;
}

VisionRope2d VisionRope2d::upload(Backend& backend, int64_t head_dim, double theta) {
  const int64_t quarter = head_dim / 4;
  std::vector<float> row(static_cast<size_t>(head_dim / 2), 0.0f);
  std::vector<float> column(row.size(), 0.0f);
  for (int64_t j = 0; j < quarter; ++j) {
    const auto f =
        static_cast<float>(1.0 / std::pow(theta, static_cast<double>(2 * j) / static_cast<double>(head_dim / 2)));
    row[static_cast<size_t>(j)] = f;
    column[static_cast<size_t>(quarter + j)] = f;
  }
  return VisionRope2d{upload_vector(backend, row), upload_vector(backend, column)};
}

void VisionRope2d::apply(Backend& backend, float* q, float* k, const int32_t* rows, const int32_t* columns, int64_t n,
                         int32_t heads, int32_t head_dim) const {
  for (float* t : {q, k}) {
    backend.rope(t, rows, n, heads, head_dim, head_dim, row_inv_freq.as<float>(), 1.0f,
                 kernels::RopeLayout::kRotateHalf);
    backend.rope(t, columns, n, heads, head_dim, head_dim, column_inv_freq.as<float>(), 1.0f,
                 kernels::RopeLayout::kRotateHalf);
  }
}

void merge_group_positions(const ImageGrid& grid, int32_t merge, const std::vector<int32_t>& groups,
                           std::vector<int32_t>& rows, std::vector<int32_t>& columns) {
  const int32_t group_columns = grid.columns / merge;
  const int32_t unit = merge * merge;
  for (int32_t g : groups) {
    const int32_t group_in_frame = g % ((grid.rows / merge) * group_columns);
    for (int32_t u = 0; u < unit; ++u) {
      rows.push_back(group_in_frame / group_columns * merge + u / merge);
      columns.push_back(group_in_frame % group_columns * merge + u % merge);
    }
  }
}

Result<WeightStore> qwen2_vl_vision_weights(const WeightStore& checkpoint) {
  return checkpoint.with_prefixes_renamed({{"model.visual.", "visual."}});
}

Result<std::unique_ptr<Qwen2VlImageEncoder>> Qwen2VlImageEncoder::load(const ModelSource& source,
                                                                       ImageInputFormat format) {
  DI_CHECK(source.config.qwen2_vl_vision.has_value() && source.backend != nullptr,
           "Qwen2VlImageEncoder needs a Qwen2.5-VL vision_config");
  const Qwen2VlVisionConfig& c = *source.config.qwen2_vl_vision;
  const int64_t hidden = c.hidden_size;
  DI_TRY(check_qwen_vl_tower(source));
  if (c.hidden_act != "silu") {
    return Error{"vision_config: hidden_act '" + c.hidden_act + "' is not supported (Qwen2.5-VL's tower runs silu)"};
  }
  if (c.qwen3) return Error{"vision_config: model_type qwen3_vl is Qwen3-VL's tower, not Qwen2.5-VL's"};
  std::unique_ptr<Qwen2VlImageEncoder> encoder(new Qwen2VlImageEncoder(*source.backend));
  encoder->weights_ = source.weights;
  encoder->arena_ = source.arena;
  encoder->config_ = c;
  encoder->format_ = format;
  const std::string prefix = "visual.";

  auto patch_embedding = load_patch_embedding(source, prefix + "patch_embed.proj", c, /*bias=*/false);
  if (!patch_embedding.ok()) return patch_embedding.error();
  encoder->patch_embedding_ = *patch_embedding;

  constexpr double kNormEps = 1e-6;  // transformers' Qwen2RMSNorm(eps=1e-6) in every block and the merger
  for (int64_t i = 0; i < c.depth; ++i) {
    const std::string block = prefix + "blocks." + std::to_string(i) + ".";
    auto norm1 = RmsNorm::load(source, block + "norm1.weight", hidden, kNormEps);
    if (!norm1.ok()) return norm1.error();
    auto norm2 = RmsNorm::load(source, block + "norm2.weight", hidden, kNormEps);
    if (!norm2.ok()) return norm2.error();
    auto attention = QwenVlAttention::load(source, block + "attn", hidden);
    if (!attention.ok()) return attention.error();
    auto gate = Linear::load(source, block + "mlp.gate_proj", c.intermediate_size, hidden, true);
    auto up = Linear::load(source, block + "mlp.up_proj", c.intermediate_size, hidden, true);
    auto down = Linear::load(source, block + "mlp.down_proj", hidden, c.intermediate_size, true);
    for (const Result<Linear>* linear : {&gate, &up, &down}) {
      if (!linear->ok()) return linear->error();
    }
    encoder->blocks_.push_back({*norm1, *norm2, *attention, *gate, *up, *down});
    encoder->full_attention_.push_back(std::find(c.fullatt_block_indexes.begin(), c.fullatt_block_indexes.end(), i) !=
                                       c.fullatt_block_indexes.end());
  }
  const int64_t merged_width = hidden * c.spatial_merge_size * c.spatial_merge_size;
  auto merger_norm = RmsNorm::load(source, prefix + "merger.ln_q.weight", hidden, kNormEps);
  if (!merger_norm.ok()) return merger_norm.error();
  auto fc1 = Linear::load(source, prefix + "merger.mlp.0", merged_width, merged_width, true);
  if (!fc1.ok()) return fc1.error();
  auto fc2 = Linear::load(source, prefix + "merger.mlp.2", c.out_hidden_size, merged_width, true);
  if (!fc2.ok()) return fc2.error();
  encoder->merger_norm_ = *merger_norm;
  encoder->merger_fc1_ = *fc1;
  encoder->merger_fc2_ = *fc2;
  const std::optional<TensorView> fc2_stored = source.weights->find(prefix + "merger.mlp.2.weight");
  encoder->rows_in_bf16_ = fc2_stored && fc2_stored->dtype == DType::kBF16;

  encoder->rope_ = VisionRope2d::upload(*source.backend, hidden / c.num_heads, c.rope_theta);
  encoder->params_ = vision_attention_params(
      hidden, c.num_heads, encoder->blocks_.empty() ? DType::kF32 : encoder->blocks_[0].attention.proj.weight.dtype);
  return encoder;
}

void Qwen2VlImageEncoder::encode(const float* pixels, const ImageGrid& grid, float* rows) {
  Backend& backend = backend_;
  const Qwen2VlVisionConfig& c = config_;
  const auto merge = static_cast<int32_t>(c.spatial_merge_size);
  const int32_t unit = merge * merge;
  const int64_t n = int64_t{grid.frames} * grid.rows * grid.columns;
  const int64_t groups = n / unit;
  const int64_t hidden = c.hidden_size;
  const int64_t patch_width = patch_embedding_.in_features;
  DI_CHECK(grid.rows % merge == 0 && grid.columns % merge == 0 && n > 0, "the grid is not whole merge groups");

  const auto groups_per_window =
      std::max<int32_t>(1, static_cast<int32_t>(c.window_size / c.spatial_merge_size / c.patch_size));
  const WindowOrder order = window_order(grid, merge, groups_per_window);
  // The rows in window order, each with its patch's row and column in the grid.
  std::vector<int32_t> permutation, row_positions, column_positions;
  for (int32_t g : order.window_groups) {
    for (int32_t u = 0; u < unit; ++u) permutation.push_back(g * unit + u);
  }
  merge_group_positions(grid, merge, order.window_groups, row_positions, column_positions);
  std::vector<int32_t> restore(static_cast<size_t>(groups));
  for (size_t j = 0; j < order.window_groups.size(); ++j)
    restore[static_cast<size_t>(order.window_groups[j])] = static_cast<int32_t>(j);
  const VisionAttentionBatch windows = VisionAttentionBatch::make(backend, order.window_lengths);
  const VisionAttentionBatch whole = VisionAttentionBatch::make(
      backend, std::vector<int32_t>(static_cast<size_t>(grid.frames), grid.rows * grid.columns));
  const DeviceBuffer permutation_ids = upload_vector(backend, permutation);
  const DeviceBuffer restore_ids = upload_vector(backend, restore);
  const DeviceBuffer row_ids = upload_vector(backend, row_positions);
  const DeviceBuffer column_ids = upload_vector(backend, column_positions);

  const int64_t intermediate = c.intermediate_size;
  const int64_t merged_width = hidden * unit;
  VisionTowerBuffers b(backend, n, hidden, std::max(windows.cache_rows(), whole.cache_rows()));
  DeviceBuffer gate = allocate_elements<float>(backend, std::max(n * intermediate, groups * merged_width));
  DeviceBuffer up = allocate_elements<float>(backend, n * intermediate);
  float* x = b.x.as<float>();
  float* normed = b.normed.as<float>();
  float* delta = b.delta.as<float>();

  // The patches' product, its rows then put in window order (attended is free until the first block).
  const DeviceBuffer patches = upload_vector(backend, std::vector<float>(pixels, pixels + n * patch_width));
  patch_embedding_.forward(backend, patches.as<float>(), n, b.attended.as<float>());
  const kernels::WeightView embedded_rows{b.attended.as<float>(), DType::kF32, n, hidden};
  backend.embedding(embedded_rows, permutation_ids.as<int32_t>(), n, x);

  for (size_t i = 0; i < blocks_.size(); ++i) {
    const Block& l = blocks_[i];
    const VisionAttentionBatch& batch = full_attention_[i] ? whole : windows;
    l.norm1.forward(backend, x, n, normed);
    l.attention.forward(backend, normed, n, b, rope_, row_ids.as<int32_t>(), column_ids.as<int32_t>(), batch, params_,
                        delta);
    backend.add(x, delta, n * hidden, x);
    l.norm2.forward(backend, x, n, normed);
    backend.matmul_group(normed, n,
                         {{l.gate.weight, l.gate.bias, gate.as<float>()}, {l.up.weight, l.up.bias, up.as<float>()}});
    backend.silu_mul(gate.as<float>(), up.as<float>(), n * intermediate, gate.as<float>());
    l.down.forward(backend, gate.as<float>(), n, delta);
    backend.add(x, delta, n * hidden, x);
  }

  // The merger over each group's unit rows side by side, then the groups back in grid order.
  merger_norm_.forward(backend, x, n, normed);
  merger_fc1_.forward(backend, normed, groups, gate.as<float>());
  // The ones gelu_mul multiplies by, kept for the next image (uploaded again only for a larger one).
  const auto gelu_count = static_cast<size_t>(groups * merged_width);
  if (ones_.size_bytes() < gelu_count * sizeof(float)) {
    ones_ = upload_vector(backend, std::vector<float>(gelu_count, 1.0f));
  }
  backend.gelu_mul(gate.as<float>(), ones_.as<float>(), groups * merged_width, gate.as<float>());
  const int64_t out_width = c.out_hidden_size;
  DeviceBuffer merged = allocate_elements<float>(backend, groups * out_width);
  DeviceBuffer restored = allocate_elements<float>(backend, groups * out_width);
  merger_fc2_.forward(backend, gate.as<float>(), groups, merged.as<float>());
  const kernels::WeightView merged_rows{merged.as<float>(), DType::kF32, groups, out_width};
  backend.embedding(merged_rows, restore_ids.as<int32_t>(), groups, restored.as<float>());
  const int64_t count = groups * out_width;
  backend.copy_to_host(rows, restored.data(), static_cast<size_t>(count) * sizeof(float));
  // transformers casts the image features to the text embeddings' dtype before it puts them in.
  if (rows_in_bf16_) {
    for (int64_t i = 0; i < count; ++i) rows[i] = bf16_to_f32(f32_to_bf16(rows[i]));
  }
}

}  // namespace deepinfer
