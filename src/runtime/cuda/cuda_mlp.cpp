// CudaBackend's fused feed-forward pieces: stacked weights (gate|up, q|k|v; 16-bit or packed FP8),
// the gated product, and the norms' rounded copy of their output for the cuBLASLt products that
// follow.
#include <string>

#include "core/check.h"
#include "kernels/cuda/gemv.h"
#include "kernels/cuda/gemv_fp8.h"
#include "runtime/cuda/cuda_backend_impl.h"

namespace deepinfer {
namespace {

bool is_16bit(DType dtype) { return dtype == DType::kBF16 || dtype == DType::kF16; }

// Rows [first, first + count) of a block-scaled FP8 weight whose row blocks they start.
kernels::WeightView fp8_rows(const kernels::WeightView& w, int64_t first, int64_t count) {
  DI_CHECK(w.dtype == DType::kF8E4M3 && w.scale_block_rows > 0 && first % w.scale_block_rows == 0,
           "rows from " << first << " of a " << dtype_name(w.dtype) << " weight with scale blocks of "
                        << w.scale_block_rows << " rows");
  kernels::WeightView rows = w;
  rows.data = static_cast<const uint8_t*>(w.data) + first * w.cols;
  rows.scales = static_cast<const float*>(w.scales) + kernels::block_scale_count(w, first);
  rows.rows = count;
  return rows;
}

}  // namespace

Result<std::optional<kernels::WeightView>> CudaBackend::load_stacked_weight(const std::vector<TensorView>& parts) {
  DI_CHECK(!parts.empty(), "load_stacked_weight needs at least one tensor");
  const TensorView& first = parts.front();
  // float32 weights are the fixtures' path: their products stay exactly as checked there.
  if (!is_16bit(first.dtype)) return std::optional<kernels::WeightView>{};
  kernels::WeightView view;
  view.dtype = first.dtype;
  view.cols = first.shape.back();
  for (const TensorView& part : parts) {
    if (part.dtype != first.dtype || part.shape.size() != 2 || part.shape[1] != view.cols) {
      return Error{"tensor " + part.name + " in " + part.file + " has dtype " + std::string(dtype_name(part.dtype)) +
                   " and shape " + shape_to_string(part.shape) + "; stacking it with " + first.name +
                   " needs a matrix of dtype " + std::string(dtype_name(first.dtype)) + " with " +
                   std::to_string(view.cols) + " columns"};
    }
    view.rows += part.shape[0];
  }
  const size_t row_bytes = static_cast<size_t>(view.cols) * dtype_size_bytes(view.dtype);
  auto* device = static_cast<uint8_t*>(allocator_.allocate(static_cast<size_t>(view.rows) * row_bytes));
  weights_.push_back(device);
  size_t offset = 0;
  for (const TensorView& part : parts) {
    const size_t bytes = static_cast<size_t>(part.shape[0]) * row_bytes;
    upload(device + offset, part.data, bytes);
    offset += bytes;
  }
  view.data = device;
  return std::optional<kernels::WeightView>{view};
}

Result<std::optional<kernels::WeightView>> CudaBackend::load_stacked_packed_weight(
    const std::vector<kernels::WeightView>& parts) {
  DI_CHECK(!parts.empty(), "load_stacked_packed_weight needs at least one weight");
  const kernels::WeightView& first = parts.front();
  kernels::WeightView view = first;
  view.rows = 0;
  view.data = nullptr;  // fp8_layout_supported checks the device copy's alignment, not the file's
  for (size_t i = 0; i < parts.size(); ++i) {
    const kernels::WeightView& part = parts[i];
    const bool same_layout = part.dtype == DType::kF8E4M3 && part.scales != nullptr && part.cols == first.cols &&
                             part.scale_block_rows == first.scale_block_rows &&
                             part.scale_block_cols == first.scale_block_cols;
    if (!same_layout || (i + 1 < parts.size() && part.rows % part.scale_block_rows != 0)) {
      return std::optional<kernels::WeightView>{};
    }
    view.rows += part.rows;
  }
  if (!reads_packed_weights(DType::kF8E4M3, WeightUse::kMatmul) || !kc::fp8_layout_supported(view)) {
    return std::optional<kernels::WeightView>{};
  }
  const auto scale_count = [&](int64_t rows) { return static_cast<size_t>(kernels::block_scale_count(view, rows)); };
  auto* codes = static_cast<uint8_t*>(allocator_.allocate(static_cast<size_t>(view.rows * view.cols)));
  weights_.push_back(codes);
  auto* scales = static_cast<float*>(allocator_.allocate(scale_count(view.rows) * sizeof(float)));
  weights_.push_back(scales);
  size_t code_offset = 0, scale_offset = 0;
  for (const kernels::WeightView& part : parts) {
    const auto bytes = static_cast<size_t>(part.rows * part.cols);
    upload(codes + code_offset, part.data, bytes);
    upload(scales + scale_offset, part.scales, scale_count(part.rows) * sizeof(float));
    code_offset += bytes;
    scale_offset += scale_count(part.rows);
  }
  view.data = codes;
  view.scales = scales;
  return std::optional<kernels::WeightView>{view};
}

void CudaBackend::gated_mlp(const float* x, const kernels::WeightView& gate_up, const kernels::WeightView& down,
                            int64_t num_rows, GluActivation activation, float* scratch, float* out) {
  if (num_rows == 0) return;
  const int64_t intermediate = gate_up.rows / 2;
  const bool gelu = activation == GluActivation::kGeluTanh;
  if (!batch_invariant_ && kc::can_gemv(x, gate_up, num_rows) && kc::can_gemv(scratch, down, num_rows)) {
    // Decode sizes: act(gate) * up comes straight out of the product (scratch: [num_rows, I]).
    kc::gemv_glu(x, gate_up, num_rows, gelu, scratch, stream_.for_op());
    gemm_.matmul(scratch, down, num_rows, out, stream_);
    return;
  }
  if (gate_up.dtype == DType::kF8E4M3) {
    // FP8 (stacked packed): gate and up into scratch's two halves, so the activation lands in place,
    // contiguous, for one down product. No op workspace: shared experts run this as side work.
    float* gate = scratch;
    float* up = scratch + num_rows * intermediate;
    gemm_.matmul(x, fp8_rows(gate_up, 0, intermediate), num_rows, gate, stream_);
    gemm_.matmul(x, fp8_rows(gate_up, intermediate, intermediate), num_rows, up, stream_);
    if (gelu) {
      gelu_tanh_mul(gate, up, num_rows * intermediate, gate);
    } else {
      silu_mul(gate, up, num_rows * intermediate, gate);
    }
    gemm_.matmul(gate, down, num_rows, out, stream_);
    return;
  }
  if (!is_16bit(down.dtype)) {
    Backend::gated_mlp(x, gate_up, down, num_rows, activation, scratch, out);
    return;
  }
  // One GEMM into scratch ([num_rows, 2 * I]; x's rounded copy is the norm's when it made one),
  // then the activation writes down's 16-bit input directly: no float32 intermediate, no cast.
  gemm_.matmul(x, gate_up, num_rows, scratch, stream_);
  void* activated = gemm_.input_buffer(num_rows * intermediate, down.dtype);
  kc::glu_rounded(scratch, DType::kF32, num_rows, intermediate, gelu, down.dtype, activated, stream_.for_op());
  gemm_.matmul_cast(activated, down, num_rows, out, stream_.for_products());
}

void* CudaBackend::stage_for_products(const float* out, int64_t num_rows, int64_t dim, DType dtype) {
  const bool products_use_gemm = batch_invariant_ || num_rows > kc::kGemvMaxRows;
  if (!products_use_gemm || !is_16bit(dtype)) return nullptr;
  return gemm_.stage(out, num_rows * dim, dtype, stream_);
}

}  // namespace deepinfer
