// Building blocks shared by architectures: checkpoint tensor lookup, linear layers, RMSNorm.
#pragma once

#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "kernels/ops.h"
#include "model/model.h"

namespace deepinfer {

// Host memory for weights computed at load time (transposed, split or dequantised tensors); the
// model keeps it alive because host backends' WeightViews point into it. Not thread-safe.
class WeightArena {
 public:
  // Stores data ([shape] float32 values) as `dtype` (F32, or BF16: exact when the values came
  // from a BF16 tensor) and returns a view of it named `name`.
  TensorView add(const std::string& name, const std::vector<int64_t>& shape, const std::vector<float>& data,
                 DType dtype = DType::kF32);
  // Stores bytes (packed weight values or scales, as they are) and returns a view of them named
  // `name`, typed dtype (the caller's description of the bytes).
  TensorView add_bytes(const std::string& name, const std::vector<int64_t>& shape, DType dtype,
                       std::vector<uint8_t> bytes);
  // Bytes held (tests: what load-time copies cost).
  int64_t size_bytes() const;
  bool empty() const { return buffers_.empty(); }
  // Frees the buffer that starts at `buffer` unless reader's data or scales point into it (a
  // device backend's view reads its own copy). Views of the other buffers stay valid.
  void release_unread(const void* buffer, const kernels::WeightView& reader);

 private:
  std::deque<std::vector<uint8_t>> buffers_;  // a deque: earlier buffers never move
};

// How a block-quantised checkpoint matrix (FP8 with weight_block_size scales) is loaded: kept packed
// where the backend's matmul (kWhereSupported) or moe_experts (kExpertWhereSupported) reads it so
// (Backend::reads_packed_weights), or dequantised at load (to Backend::dequantised_fp8_dtype)
// whatever the backend (a weight other ops read too, such as MLA's kv_b_proj, whose per-head slices
// head_matmul takes).
enum class Packing : uint8_t { kWhereSupported, kExpertWhereSupported, kDequantise };

// The tensor `name` with exactly `shape`, made usable by the source's backend; FP8 dequantised.
Result<kernels::WeightView> load_tensor(const ModelSource& source, const std::string& name,
                                        const std::vector<int64_t>& shape);
// The matrix `name` [rows, cols] as a matmul operand: as load_tensor, but an FP8 one stays packed
// (its e4m3 bytes read in place, its scales as float32 in the arena) per `packing`.
Result<kernels::WeightView> load_matrix(const ModelSource& source, const std::string& name,
                                        const std::vector<int64_t>& shape, Packing packing = Packing::kWhereSupported);
// FP8 matrices (name, [rows_i, cols]) stacked in order as one packed operand
// (Backend::load_stacked_packed_weight), or nullopt where load_matrix would not keep each one packed
// or the backend makes no stacked copy.
Result<std::optional<kernels::WeightView>> load_stacked_fp8(
    const ModelSource& source, const std::vector<std::pair<std::string, std::vector<int64_t>>>& parts);
// The tensor `name` with exactly `shape` (any rank), converted to float32 on the host.
Result<std::vector<float>> read_tensor_f32(const ModelSource& source, const std::string& name,
                                           const std::vector<int64_t>& shape);
// The element type a checkpoint tensor rewritten on the host (transposed, reshaped, split) is kept
// in: BF16 stays BF16, its values passing through float32 exactly; anything else becomes F32.
inline DType host_rewrite_dtype(DType stored) { return stored == DType::kBF16 ? DType::kBF16 : DType::kF32; }
// Makes a tensor the source's arena holds usable by the backend (Backend::load_weight), or a packed
// view whose data or scales it holds (load_packed_weight); the arena then lets go of the buffers
// the backend's view does not read, so host memory keeps only what host backends' views read.
Result<kernels::WeightView> load_arena_weight(const ModelSource& source, const TensorView& tensor);
Result<kernels::WeightView> load_arena_packed_weight(const ModelSource& source, const kernels::WeightView& packed);
// Puts host float32 data ([rows, cols], or [cols] when rows == 0) into the arena as dtype and
// onto the backend.
Result<kernels::WeightView> load_host_tensor(const ModelSource& source, const std::string& name, int64_t rows,
                                             int64_t cols, const std::vector<float>& data, DType dtype = DType::kF32);

// y = x W^T (+ b); W: [out_features, in_features] as in PyTorch.
struct Linear {
  kernels::WeightView weight;
  kernels::WeightView bias;  // data == nullptr when the layer has none
  int64_t in_features = 0;
  int64_t out_features = 0;

  // Loads prefix + ".weight" (load_matrix, per packing) and prefix + ".bias" when has_bias.
  static Result<Linear> load(const ModelSource& source, const std::string& prefix, int64_t out_features,
                             int64_t in_features, bool has_bias, Packing packing = Packing::kWhereSupported);
  // x: [num_rows, in_features] -> y: [num_rows, out_features]
  void forward(Backend& backend, const float* x, int64_t num_rows, float* y) const {
    backend.matmul(x, weight, bias, num_rows, y);
  }
  // Bytes of the weight as held (packed FP8: values and scales) and of the bias.
  int64_t weight_bytes() const;
};

struct RmsNorm {
  kernels::WeightView weight;  // [dim]
  int64_t dim = 0;
  float eps = 0.0f;
  float weight_offset = 0.0f;  // Gemma stores w - 1

  static Result<RmsNorm> load(const ModelSource& source, const std::string& name, int64_t dim, double eps);
  // x, out: [num_rows, dim]
  void forward(Backend& backend, const float* x, int64_t num_rows, float* out) const {
    backend.rms_norm(x, weight, weight_offset, num_rows, dim, eps, out);
  }
  // residual += x; out = norm(residual)
  void add_forward(Backend& backend, float* residual, const float* x, int64_t num_rows, float* out) const {
    backend.add_rms_norm(residual, x, weight, weight_offset, num_rows, dim, eps, out);
  }
  NormWeights weights() const { return NormWeights{weight, weight_offset, eps}; }
};

// LayerNorm with weight and bias (vision towers).
struct LayerNorm {
  kernels::WeightView weight;  // [dim]
  kernels::WeightView bias;    // [dim]
  int64_t dim = 0;
  float eps = 0.0f;

  static Result<LayerNorm> load(const ModelSource& source, const std::string& prefix, int64_t dim, double eps);
  void forward(Backend& backend, const float* x, int64_t num_rows, float* out) const {
    backend.layer_norm(x, weight, bias, num_rows, dim, eps, out);
  }
};

// A decoder sub-layer run on the residual stream itself (Backend::fuses_norm_products): it
// normalises the stream with norm inside its first product and adds its output back with its last.
// normed and delta: [num_tokens, hidden] scratch for a backend that runs those ops unfused.
struct ResidualStream {
  float* residual;
  NormWeights norm;
  float* normed;
  float* delta;
};

}  // namespace deepinfer
