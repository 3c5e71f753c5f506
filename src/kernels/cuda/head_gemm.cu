#include "kernels/cuda/head_gemm.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <type_traits>

#include "core/check.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_util.cuh"

namespace deepinfer::kernels::cuda {
namespace {

// cuBLAS takes its scratch from here, so a graph capture never makes it allocate.
constexpr size_t kWorkspaceBytes = size_t{4} << 20;
constexpr int kThreads = 256;

// rounded[t, h, i] = x[t * row_stride + h * head_stride + i] in Element, for i < width.
template <typename Element>
__global__ void round_head_rows_kernel(const float* x, int64_t row_stride, int64_t head_stride, int32_t num_heads,
                                       int64_t width, int64_t count, Element* rounded) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < count; i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t column = i % width;
    const int64_t head = (i / width) % num_heads;
    const int64_t row = i / (width * num_heads);
    const float value = x[row * row_stride + head * head_stride + column];
    if constexpr (std::is_same_v<Element, __half>) {
      rounded[i] = __float2half_rn(value);
    } else {
      rounded[i] = __float2bfloat16_rn(value);
    }
  }
}

cudaDataType_t weight_type(DType dtype) {
  switch (dtype) {
    case DType::kBF16: return CUDA_R_16BF;
    case DType::kF16: return CUDA_R_16F;
    default: return CUDA_R_32F;
  }
}

}  // namespace

HeadGemm::HeadGemm() {
  DI_CUBLAS_CHECK(cublasCreate(&handle_));
  DI_CUDA_CHECK(cudaMalloc(&workspace_, kWorkspaceBytes));
}

HeadGemm::~HeadGemm() {
  if (handle_ != nullptr) cublasDestroy(handle_);
  if (workspace_ != nullptr) cudaFree(workspace_);
}

void HeadGemm::bind(cudaStream_t stream) {
  // cublasSetStream drops a user workspace, so it is set again after it.
  DI_CUBLAS_CHECK(cublasSetStream(handle_, stream));
  DI_CUBLAS_CHECK(cublasSetWorkspace(handle_, workspace_, kWorkspaceBytes));
}

size_t HeadGemm::input_bytes(const HeadProducts& p) {
  if (p.w.dtype == DType::kF32) return 0;
  return static_cast<size_t>(p.num_rows * p.num_heads * p.w.cols) * dtype_size_bytes(p.w.dtype);
}

void HeadGemm::run(const HeadProducts& p, void* rounded_input, cudaStream_t stream) {
  if (p.num_rows == 0 || p.num_heads == 0) return;
  DI_CHECK(p.w.dtype == DType::kF32 || p.w.dtype == DType::kBF16 || p.w.dtype == DType::kF16,
           "head products take float32, bf16 or f16 weights");
  const int64_t k = p.w.cols;
  const void* b = p.x;
  int64_t ldb = p.x_row_stride;
  int64_t stride_b = p.x_head_stride;
  if (p.w.dtype != DType::kF32) {
    const int64_t count = p.num_rows * p.num_heads * k;
    const unsigned grid = grid_for(count, kThreads);
    if (p.w.dtype == DType::kBF16) {
      round_head_rows_kernel<<<grid, kThreads, 0, stream>>>(p.x, p.x_row_stride, p.x_head_stride, p.num_heads, k,
                                                            count, static_cast<__nv_bfloat16*>(rounded_input));
    } else {
      round_head_rows_kernel<<<grid, kThreads, 0, stream>>>(p.x, p.x_row_stride, p.x_head_stride, p.num_heads, k,
                                                            count, static_cast<__half*>(rounded_input));
    }
    DI_CUDA_CHECK_LAUNCH("round_head_rows_kernel");
    b = rounded_input;
    ldb = p.num_heads * k;
    stride_b = k;
  }
  // Column-major view: y_h^T [N, M] = W_h [N, K] (stored as a [K, N] column-major matrix, used
  // transposed) times x_h^T [K, M].
  const float alpha = 1.0f;
  const float beta = 0.0f;
  const cudaDataType_t type = weight_type(p.w.dtype);
  bind(stream);
  DI_CUBLAS_CHECK(cublasGemmStridedBatchedEx(
      handle_, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(p.w.rows), static_cast<int>(p.num_rows), static_cast<int>(k),
      &alpha, p.w.data, type, static_cast<int>(k), static_cast<long long>(p.w_head_stride * k), b, type,
      static_cast<int>(ldb), static_cast<long long>(stride_b), &beta, p.y, CUDA_R_32F, static_cast<int>(p.y_row_stride),
      static_cast<long long>(p.y_head_stride), p.num_heads, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

void HeadGemm::bf16_product(const void* x, int64_t x_row_stride, const WeightView& w, int64_t num_rows, void* y,
                            cudaStream_t stream) {
  if (num_rows == 0) return;
  DI_CHECK(w.dtype == DType::kBF16, "bf16_product takes bf16 weights, not " << dtype_name(w.dtype));
  const float alpha = 1.0f;
  const float beta = 0.0f;
  bind(stream);
  // Column-major: y^T [N, M] = w (a [K, N] column-major matrix, transposed) times x^T [K, M].
  DI_CUBLAS_CHECK(cublasGemmEx(handle_, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(w.rows), static_cast<int>(num_rows),
                               static_cast<int>(w.cols), &alpha, w.data, CUDA_R_16BF, static_cast<int>(w.cols), x,
                               CUDA_R_16BF, static_cast<int>(x_row_stride), &beta, y, CUDA_R_16BF,
                               static_cast<int>(w.rows), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

}  // namespace deepinfer::kernels::cuda
