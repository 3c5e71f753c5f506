// kernels::HeadProducts on the device: every head's product in one strided-batched cuBLAS GEMM
// (tensor cores for 16-bit weights, float32 accumulation), after one launch that rounds the
// heads' input slices to the weight dtype; float32 weights read x in place. Also MLA's other
// cuBLAS product, the bf16 expansion of latent rows for prefill.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstddef>

#include "kernels/ops.h"

namespace deepinfer::kernels::cuda {

class HeadGemm {
 public:
  HeadGemm();
  ~HeadGemm();
  HeadGemm(const HeadGemm&) = delete;
  HeadGemm& operator=(const HeadGemm&) = delete;

  // Bytes of device memory run needs for p's rounded input (0 for float32 weights).
  static size_t input_bytes(const HeadProducts& p);
  // Enqueues the products on stream; rounded_input: input_bytes(p) bytes, unused when 0. The
  // heuristic may pick another algorithm for another num_rows, so a row's bits can depend on the
  // batch: the batch-invariant mode runs the per-head products instead.
  void run(const HeadProducts& p, void* rounded_input, cudaStream_t stream);
  // y[num_rows, w.rows] = x[num_rows, w.cols] @ w^T with x, w and y bf16 (float32 accumulation):
  // MLA's expansion of latent rows by kv_b_proj for prefill. x rows sit x_row_stride elements
  // apart, y rows are contiguous.
  void bf16_product(const void* x, int64_t x_row_stride, const WeightView& w, int64_t num_rows, void* y,
                    cudaStream_t stream);

 private:
  void bind(cudaStream_t stream);

  cublasHandle_t handle_ = nullptr;
  void* workspace_ = nullptr;
};

}  // namespace deepinfer::kernels::cuda
