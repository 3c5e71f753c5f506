// MoE expert products for prefill-sized batches on cuBLAS's grouped GEMM (cublasGemmGroupedBatchedEx:
// one problem per expert that has rows; bf16/f16 tensor cores, float32 accumulation, outputs in the
// weights' dtype: the grouped GEMM takes one type for A, B and C).
// The problems' sizes are host values, so the caller reads the grouping's offsets back first:
// eager prefill steps only, never under graph capture. At a 4K prompt it runs the expert products
// of DeepSeek-V2-Lite and Qwen3-30B-A3B 2.8-4.5x faster than the grouped mma kernels
// (docs/benchmarks.md, tools/gpu/grouped_gemm_probe.cu).
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <initializer_list>
#include <utility>
#include <vector>

#include "kernels/cuda/moe_ops.h"

namespace deepinfer::kernels::cuda {

class MoeGroupedGemm {
 public:
  MoeGroupedGemm();
  ~MoeGroupedGemm();
  MoeGroupedGemm(const MoeGroupedGemm&) = delete;
  MoeGroupedGemm& operator=(const MoeGroupedGemm&) = delete;

  // For the grouped rows i of expert e (offsets[e] <= i < offsets[e + 1]; offsets has
  // experts.size() + 1 entries): gate_up[i, 0:I] = x[i] @ gate_e^T and gate_up[i, I:2I] =
  // x[i] @ up_e^T. x: [rows, hidden] and gate_up: [rows, 2 * I] in dtype (kBF16 or kF16).
  void gate_up(const std::vector<ExpertPointers>& experts, const std::vector<int32_t>& offsets, int64_t hidden,
               int64_t intermediate, DType dtype, const void* x, void* gate_up, cudaStream_t stream);
  // y[i] = h[i] @ down_e^T for the same rows. h: [rows, intermediate] and y: [rows, hidden] in dtype.
  void down(const std::vector<ExpertPointers>& experts, const std::vector<int32_t>& offsets, int64_t hidden,
            int64_t intermediate, DType dtype, const void* h, void* y, cudaStream_t stream);

 private:
  // y = x @ w^T of one expert's rows: w [n, k] row-major, x [rows, k] with rows ld_x apart, y rows
  // ld_y apart.
  struct Problem {
    const void* w;
    const void* x;
    void* y;
    int rows, n, k, ld_x, ld_y;
  };
  // One problem per expert with rows and per listed weight of it: y[i, column + j] = x[i] @ w^T
  // for the expert's rows i, w being [n, k]; x rows are k wide, y rows y_width.
  void per_expert(const std::vector<ExpertPointers>& experts, const std::vector<int32_t>& offsets,
                  std::initializer_list<std::pair<const void* ExpertPointers::*, int64_t>> weights, int64_t n,
                  int64_t k, DType dtype, const void* x, void* y, int64_t y_width, cudaStream_t stream);
  void run(const std::vector<Problem>& problems, DType dtype, cudaStream_t stream);

  cublasHandle_t handle_ = nullptr;
  void* workspace_ = nullptr;
  // The pointer arrays cuBLAS reads on the device, in two slots used in turn: each slot's pinned
  // host copy is rewritten only once its last upload (event) has run.
  static constexpr int kSlots = 2;
  void** host_pointers_ = nullptr;    // [kSlots][3 * kMaxProblems], pinned
  void** device_pointers_ = nullptr;  // [kSlots][3 * kMaxProblems]
  cudaEvent_t uploaded_[kSlots] = {};
  int next_slot_ = 0;
};

}  // namespace deepinfer::kernels::cuda
