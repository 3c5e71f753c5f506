// Tensor lookup, linear and norm loading.
#include "model/layers/linear.h"

#include <algorithm>
#include <cstring>

#include "core/check.h"
#include "weights/fp8.h"

namespace deepinfer {

Result<kernels::WeightView> load_tensor(const ModelSource& source, const std::string& name,
                                        const std::vector<int64_t>& shape) {
  auto tensor = source.weights->get(name, shape);
  if (!tensor.ok()) return tensor.error();
  if (tensor->dtype != DType::kF8E4M3) return source.backend->load_weight(*tensor);
  // FP8 block-scaled (DeepSeek-V3): dequantised here, once, to the backend's choice of type.
  auto values = read_tensor_f32(source, name, shape);
  if (!values.ok()) return values.error();
  const Fp8Config block = source.config.fp8.value_or(Fp8Config{});
  const DType dtype = source.backend->dequantised_fp8_dtype(block.block_rows, block.block_cols);
  return load_arena_weight(source, source.arena->add(name, shape, *values, dtype));
}

namespace {

// A checkpoint matrix load_matrix keeps packed: its e4m3 bytes read in place, its scales converted
// to float32 here (view.scales points at them).
struct PackedMatrix {
  kernels::WeightView view;
  TensorView scale_inv;
  std::vector<float> scales;
};

// The matrix `name` as load_matrix keeps it packed, or nullopt where it dequantises.
Result<std::optional<PackedMatrix>> packed_matrix(const ModelSource& source, const std::string& name,
                                                  const std::vector<int64_t>& shape, Packing packing) {
  auto tensor = source.weights->get(name, shape);
  if (!tensor.ok()) return tensor.error();
  const Fp8Config block = source.config.fp8.value_or(Fp8Config{});
  // The CPU tiles step through whole scale blocks 16 columns at a time; other block widths (none
  // published) are dequantised at load.
  const WeightUse use = packing == Packing::kExpertWhereSupported ? WeightUse::kExperts : WeightUse::kMatmul;
  const bool packed = tensor->dtype == DType::kF8E4M3 && shape.size() == 2 && packing != Packing::kDequantise &&
                      source.backend->reads_packed_weights(DType::kF8E4M3, use) && block.block_cols % 16 == 0;
  if (!packed) return std::optional<PackedMatrix>{};
  const std::optional<TensorView> scale_inv = source.weights->find(name + "_scale_inv");
  if (!scale_inv) return Error{"tensor " + name + " is F8_E4M3 but " + name + "_scale_inv is missing"};
  if (auto checked = check_fp8_scales(*tensor, *scale_inv, block.block_rows, block.block_cols); !checked.ok()) {
    return checked.error();
  }
  PackedMatrix matrix{kernels::WeightView{}, *scale_inv, std::vector<float>(static_cast<size_t>(scale_inv->numel()))};
  convert_to_f32(scale_inv->data, scale_inv->dtype, matrix.scales.size(), matrix.scales.data());
  matrix.view.data = tensor->data;
  matrix.view.dtype = DType::kF8E4M3;
  matrix.view.rows = shape[0];
  matrix.view.cols = shape[1];
  matrix.view.scales = matrix.scales.data();
  matrix.view.scale_block_rows = static_cast<int32_t>(block.block_rows);
  matrix.view.scale_block_cols = static_cast<int32_t>(block.block_cols);
  return std::optional<PackedMatrix>{std::move(matrix)};
}

}  // namespace

Result<kernels::WeightView> load_matrix(const ModelSource& source, const std::string& name,
                                        const std::vector<int64_t>& shape, Packing packing) {
  auto packed = packed_matrix(source, name, shape, packing);
  if (!packed.ok()) return packed.error();
  if (!*packed) return load_tensor(source, name, shape);
  // Host backends read the scales in place: they live in the arena, as long as the model.
  kernels::WeightView view = (*packed)->view;
  view.scales = source.arena->add((*packed)->scale_inv.name, (*packed)->scale_inv.shape, (*packed)->scales).data;
  return load_arena_packed_weight(source, view);
}

Result<std::optional<kernels::WeightView>> load_stacked_fp8(
    const ModelSource& source, const std::vector<std::pair<std::string, std::vector<int64_t>>>& parts) {
  // The parts' scales stay here: a backend that stacks copies them, and one that does not (host
  // backends) gets them again through load_matrix.
  std::vector<PackedMatrix> matrices;
  for (const auto& [name, shape] : parts) {
    auto packed = packed_matrix(source, name, shape, Packing::kWhereSupported);
    if (!packed.ok()) return packed.error();
    if (!*packed) return std::optional<kernels::WeightView>{};
    matrices.push_back(std::move(**packed));
  }
  std::vector<kernels::WeightView> views;
  for (const PackedMatrix& matrix : matrices) views.push_back(matrix.view);
  return source.backend->load_stacked_packed_weight(views);
}

TensorView WeightArena::add(const std::string& name, const std::vector<int64_t>& shape, const std::vector<float>& data,
                            DType dtype) {
  DI_CHECK(dtype == DType::kF32 || dtype == DType::kBF16, "the weight arena stores F32 or BF16");
  std::vector<uint8_t>& bytes = buffers_.emplace_back(data.size() * dtype_size_bytes(dtype));
  if (dtype == DType::kF32) {
    std::memcpy(bytes.data(), data.data(), bytes.size());
  } else {
    auto* bits = reinterpret_cast<uint16_t*>(bytes.data());
    for (size_t i = 0; i < data.size(); ++i) bits[i] = f32_to_bf16(data[i]);
  }
  TensorView view;
  view.name = name;
  view.dtype = dtype;
  view.shape = shape;
  view.data = bytes.data();
  view.size_bytes = bytes.size();
  view.file = "(computed at load)";
  return view;
}

TensorView WeightArena::add_bytes(const std::string& name, const std::vector<int64_t>& shape, DType dtype,
                                  std::vector<uint8_t> bytes) {
  std::vector<uint8_t>& stored = buffers_.emplace_back(std::move(bytes));
  TensorView view;
  view.name = name;
  view.dtype = dtype;
  view.shape = shape;
  view.data = stored.data();
  view.size_bytes = stored.size();
  view.file = "(computed at load)";
  return view;
}

void WeightArena::release_unread(const void* buffer, const kernels::WeightView& reader) {
  const auto found = std::find_if(buffers_.begin(), buffers_.end(), [buffer](const std::vector<uint8_t>& held) {
    return !held.empty() && held.data() == buffer;
  });
  if (found == buffers_.end()) return;
  const auto reads = [&found](const void* p) {
    const auto* byte = static_cast<const uint8_t*>(p);
    return byte >= found->data() && byte < found->data() + found->size();
  };
  if (!reads(reader.data) && !reads(reader.scales)) buffers_.erase(found);  // other vectors' data never moves
}

int64_t WeightArena::size_bytes() const {
  int64_t bytes = 0;
  for (const std::vector<uint8_t>& buffer : buffers_) bytes += static_cast<int64_t>(buffer.size());
  return bytes;
}

Result<std::vector<float>> read_tensor_f32(const ModelSource& source, const std::string& name,
                                           const std::vector<int64_t>& shape) {
  auto tensor = source.weights->get(name, shape);
  if (!tensor.ok()) return tensor.error();
  if (tensor->dtype == DType::kF8E4M3) {
    const std::optional<TensorView> scale_inv = source.weights->find(name + "_scale_inv");
    if (!scale_inv) return Error{"tensor " + name + " is F8_E4M3 but " + name + "_scale_inv is missing"};
    const Fp8Config block = source.config.fp8.value_or(Fp8Config{});
    return dequantize_fp8(*tensor, *scale_inv, block.block_rows, block.block_cols);
  }
  std::vector<float> data(static_cast<size_t>(tensor->numel()));
  convert_to_f32(tensor->data, tensor->dtype, data.size(), data.data());
  return data;
}

Result<kernels::WeightView> load_host_tensor(const ModelSource& source, const std::string& name, int64_t rows,
                                             int64_t cols, const std::vector<float>& data, DType dtype) {
  DI_CHECK(source.arena != nullptr, "ModelSource has no arena");
  DI_CHECK(static_cast<int64_t>(data.size()) == std::max<int64_t>(rows, 1) * cols, name << ": size mismatch");
  const std::vector<int64_t> shape = rows == 0 ? std::vector<int64_t>{cols} : std::vector<int64_t>{rows, cols};
  return load_arena_weight(source, source.arena->add(name, shape, data, dtype));
}

Result<kernels::WeightView> load_arena_weight(const ModelSource& source, const TensorView& tensor) {
  auto loaded = source.backend->load_weight(tensor);
  if (loaded.ok()) source.arena->release_unread(tensor.data, *loaded);
  return loaded;
}

Result<kernels::WeightView> load_arena_packed_weight(const ModelSource& source, const kernels::WeightView& packed) {
  auto loaded = source.backend->load_packed_weight(packed);
  if (loaded.ok()) {
    source.arena->release_unread(packed.data, *loaded);
    source.arena->release_unread(packed.scales, *loaded);
  }
  return loaded;
}

Result<Linear> Linear::load(const ModelSource& source, const std::string& prefix, int64_t out_features,
                            int64_t in_features, bool has_bias, Packing packing) {
  Linear linear;
  linear.in_features = in_features;
  linear.out_features = out_features;
  auto weight = load_matrix(source, prefix + ".weight", {out_features, in_features}, packing);
  if (!weight.ok()) return weight.error();
  linear.weight = *weight;
  if (has_bias) {
    auto bias = load_tensor(source, prefix + ".bias", {out_features});
    if (!bias.ok()) return bias.error();
    linear.bias = *bias;
  }
  return linear;
}

int64_t Linear::weight_bytes() const {
  int64_t bytes = kernels::weight_bytes(weight);
  if (bias.data != nullptr) bytes += bias.cols * static_cast<int64_t>(dtype_size_bytes(bias.dtype));
  return bytes;
}

Result<RmsNorm> RmsNorm::load(const ModelSource& source, const std::string& name, int64_t dim, double eps) {
  RmsNorm norm;
  norm.dim = dim;
  norm.eps = static_cast<float>(eps);
  auto weight = load_tensor(source, name, {dim});
  if (!weight.ok()) return weight.error();
  norm.weight = *weight;
  return norm;
}

Result<LayerNorm> LayerNorm::load(const ModelSource& source, const std::string& prefix, int64_t dim, double eps) {
  LayerNorm norm;
  norm.dim = dim;
  norm.eps = static_cast<float>(eps);
  auto weight = load_tensor(source, prefix + ".weight", {dim});
  if (!weight.ok()) return weight.error();
  norm.weight = *weight;
  auto bias = load_tensor(source, prefix + ".bias", {dim});
  if (!bias.ok()) return bias.error();
  norm.bias = *bias;
  return norm;
}

}  // namespace deepinfer
