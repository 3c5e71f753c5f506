// CudaBackend's fused feed-forward pieces: stacked gate|up weights, the gated product, and the
// norms' rounded copy of their output for the cuBLASLt products that follow.
#include <string>

#include "kernels/cuda/gemv.h"
#include "runtime/cuda/cuda_backend_impl.h"

namespace deepinfer {
namespace {

bool is_16bit(DType dtype) { return dtype == DType::kBF16 || dtype == DType::kF16; }

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
