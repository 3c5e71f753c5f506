// MoE expert products for prefill-sized batches as grouped GEMMs: one problem per expert that has
// rows and per projection, float32 accumulation, outputs in the weights' dtype. bf16 weights on a
// Hopper GPU run on the project's wgmma kernel (grouped_gemm_wgmma.h); f16 weights, other GPUs and
// operands TMA cannot describe on cuBLAS's grouped GEMM (cublasGemmGroupedBatchedEx, which takes one
// type for A, B and C). The problems' sizes are host values, so the caller reads the grouping's
// offsets back first: eager prefill steps only, never under graph capture. At a 4K prompt cuBLAS
// ran the expert products of DeepSeek-V2-Lite and Qwen3-30B-A3B 2.8-4.5x faster than the grouped
// mma kernels (docs/benchmarks.md, tools/gpu/grouped_gemm_probe.cu), at ~40 % of a dense GEMM's rate.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <initializer_list>
#include <map>
#include <tuple>
#include <utility>
#include <vector>

#include "kernels/cuda/grouped_gemm_wgmma.h"
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
  // x[i] @ up_e^T. x: [offsets.back(), hidden] and gate_up: [rows, 2 * I] in dtype (kBF16 or kF16).
  void gate_up(const std::vector<ExpertPointers>& experts, const std::vector<int32_t>& offsets, int64_t hidden,
               int64_t intermediate, DType dtype, const void* x, void* gate_up, cudaStream_t stream);
  // y[i] = h[i] @ down_e^T for the same rows. h: [rows, intermediate] and y: [rows, hidden] in dtype.
  void down(const std::vector<ExpertPointers>& experts, const std::vector<int32_t>& offsets, int64_t hidden,
            int64_t intermediate, DType dtype, const void* h, void* y, cudaStream_t stream);

 private:
  // y = x[row0 : row0 + rows] @ w^T of one expert: w [n, k] row-major, x rows k wide, y rows ld_y apart.
  struct Problem {
    const void* w;
    int64_t row0;
    void* y;
    int rows, n, ld_y;
  };
  // One problem per expert with rows and per listed weight of it: y[i, column + j] = x[i] @ w^T
  // for the expert's rows i, w being [n, k]; x rows are k wide, y rows y_width.
  void per_expert(const std::vector<ExpertPointers>& experts, const std::vector<int32_t>& offsets,
                  std::initializer_list<std::pair<const void* ExpertPointers::*, int64_t>> weights, int64_t n,
                  int64_t k, DType dtype, const void* x, void* y, int64_t y_width, cudaStream_t stream);
  bool on_wgmma(const std::vector<Problem>& problems, DType dtype, const void* x, int64_t k) const;
  void run_wgmma(const std::vector<Problem>& problems, const void* x, int64_t x_rows, int64_t k, cudaStream_t stream);
  void run_cublas(const std::vector<Problem>& problems, DType dtype, const void* x, int64_t k, cudaStream_t stream);
  // The host half of the next upload slot, free to rewrite once its last upload has run.
  char* begin_upload();
  // Sends the slot's first bytes; returns where they land on the device.
  char* upload(size_t bytes, cudaStream_t stream);

  cublasHandle_t handle_ = nullptr;
  void* workspace_ = nullptr;
  // What the kernels read on the device (cuBLAS's pointer arrays, the wgmma kernel's weight maps and
  // products), in two slots used in turn.
  static constexpr int kSlots = 2;
  char* host_slots_ = nullptr;    // [kSlots][kSlotBytes], pinned
  char* device_slots_ = nullptr;  // [kSlots][kSlotBytes]
  cudaEvent_t uploaded_[kSlots] = {};
  int slot_ = 0;
  // TMA descriptions of the expert weights, by (weight, n, k): weights outlive the steps.
  std::map<std::tuple<const void*, int64_t, int64_t>, CUtensorMap> weight_maps_;
};

}  // namespace deepinfer::kernels::cuda
