// CudaBackend's decode fusion: a decoder layer's residual adds in the epilogue of the GEMV that
// produces them (kernels/cuda/gemv.h), with the same bits as the add_rms_norm they replace (its
// norm then runs as rms_norm alone).
// Other shapes and dtypes take Backend's defaults. BackendOptions::fused_decode turns it off.
#include "kernels/cuda/gemv.h"
#include "runtime/cuda/cuda_backend_impl.h"

namespace deepinfer {

bool CudaBackend::fuses_norm_products(int64_t num_rows, DType weight_dtype) const {
  return fused_decode_ && !batch_invariant_ && num_rows >= 1 && num_rows <= kc::kGemvMaxRows &&
         (weight_dtype == DType::kBF16 || weight_dtype == DType::kF16 || weight_dtype == DType::kF8E4M3);
}

void CudaBackend::matmul_add(const float* x, const kernels::WeightView& w, int64_t num_rows, float* delta,
                             float* residual) {
  if (batch_invariant_ || !kc::can_gemv(x, w, num_rows)) {
    Backend::matmul_add(x, w, num_rows, delta, residual);
    return;
  }
  kc::gemv_add(x, w, num_rows, residual, stream_.for_op());
}

void CudaBackend::norm_gated_mlp_add(float* residual, const NormWeights& norm, const kernels::WeightView& gate_up,
                                     const kernels::WeightView& down, int64_t num_rows, GluActivation activation,
                                     float* normed, float* scratch, float* delta) {
  if (batch_invariant_ || !kc::can_gemv(normed, gate_up, num_rows) || !kc::can_gemv(scratch, down, num_rows)) {
    Backend::norm_gated_mlp_add(residual, norm, gate_up, down, num_rows, activation, normed, scratch, delta);
    return;
  }
  rms_norm(residual, norm.weight, norm.weight_offset, num_rows, gate_up.cols, norm.eps, normed);
  kc::gemv_glu(normed, gate_up, num_rows, activation == GluActivation::kGeluTanh, scratch, stream_.for_op());
  kc::gemv_add(scratch, down, num_rows, residual, stream_.for_op());
}

}  // namespace deepinfer
