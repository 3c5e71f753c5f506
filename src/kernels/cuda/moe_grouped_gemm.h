// MoE expert products for prefill-sized batches as grouped GEMMs: one problem per expert that has
// rows and per projection, float32 accumulation, outputs in the weights' dtype. bf16 weights on a
// Hopper GPU run on the project's wgmma kernel (grouped_gemm_wgmma.h); f16 weights, other GPUs and
// operands TMA cannot describe on cuBLAS's grouped GEMM (cublasGemmGroupedBatchedEx, which takes one
// type for A, B and C). The problems' sizes are host values, so the caller reads the grouping's
// offsets back first: eager prefill steps only, never under graph capture. FP8 experts run on the
// grouped FP8 wgmma kernel (grouped_gemm_fp8.h). At a 4K prompt cuBLAS
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

#include "kernels/cuda/gemv_fp8.h"
#include "kernels/cuda/grouped_gemm_wgmma.h"
#include "kernels/cuda/moe_ops.h"

namespace deepinfer::kernels::cuda {

class MoeGroupedGemm {
 public:
  MoeGroupedGemm();
  ~MoeGroupedGemm();
  MoeGroupedGemm(const MoeGroupedGemm&) = delete;
  MoeGroupedGemm& operator=(const MoeGroupedGemm&) = delete;

  // Whether experts of this dtype and these sizes run on the wgmma kernel (bf16 on a Hopper GPU,
  // widths multiples of 8, 16-byte aligned weights): then gate_up_activated and down_biased apply.
  static bool on_wgmma(DType dtype, int64_t hidden, int64_t intermediate, bool aligned);

  // For the grouped rows i of expert e (offsets[e] <= i < offsets[e + 1]; offsets has
  // experts.size() + 1 entries) on the wgmma kernel: h[i] = act(x[i] @ gate_e^T + gate_bias_e,
  // x[i] @ up_e^T + up_bias_e) with gate and up rounded to bf16, then h; epilogue says the bias dtype
  // and the activation. x: [offsets.back(), hidden], h: [rows, intermediate], bf16. With fp8 (FP8
  // experts, on_fp8_wgmma): on the FP8 kernel over fp8's rows (x unused), h in float32.
  void gate_up_activated(const std::vector<ExpertPointers>& experts, const std::vector<int32_t>& offsets,
                         int64_t hidden, int64_t intermediate, const WgmmaEpilogue& epilogue, const void* x, void* h,
                         cudaStream_t stream, const Fp8Rows* fp8 = nullptr);
  // On cuBLAS (experts without biases): gate_up[i, 0:I] = x[i] @ gate_e^T and gate_up[i, I:2I] =
  // x[i] @ up_e^T. x: [offsets.back(), hidden] and gate_up: [rows, 2 * I] in dtype (kBF16 or kF16).
  void gate_up(const std::vector<ExpertPointers>& experts, const std::vector<int32_t>& offsets, int64_t hidden,
               int64_t intermediate, DType dtype, const void* x, void* gate_up, cudaStream_t stream);
  // On cuBLAS: y[i] = h[i] @ down_e^T for the same rows. h: [rows, intermediate] and y: [rows,
  // hidden] in dtype.
  void down(const std::vector<ExpertPointers>& experts, const std::vector<int32_t>& offsets, int64_t hidden,
            int64_t intermediate, DType dtype, const void* h, void* y, cudaStream_t stream);
  // On the wgmma kernel: y[i] = h[i] @ down_e^T + down_bias_e (biases of bias_dtype, where the
  // expert has one), bf16. With fp8, as gate_up_activated: over fp8's rows, y in float32.
  void down_biased(const std::vector<ExpertPointers>& experts, const std::vector<int32_t>& offsets, int64_t hidden,
                   int64_t intermediate, DType bias_dtype, const void* h, void* y, cudaStream_t stream,
                   const Fp8Rows* fp8 = nullptr);

  // Whether FP8 experts (e4m3, 128 x 128 float32 block scales) of these sizes run on the FP8 wgmma
  // kernel (grouped_gemm_fp8.h: widths multiples of 128, 16-byte aligned codes, a Hopper GPU): then
  // gate_up_activated and down_biased apply with their inputs quantised per row per 128 columns
  // (gemv_fp8.h's Fp8Rows).
  static bool on_fp8_wgmma(int64_t hidden, int64_t intermediate, int32_t scale_block_rows, bool aligned);

 private:
  // y = x[row0 : row0 + rows] @ w^T (+ bias) of one expert: w [n, k] row-major, x rows k wide, y
  // rows ld_y apart. Gated (wgmma): w, bias and scales are gate's and up's, y the activation.
  struct Problem {
    const void* w[2];
    const void* bias[2];
    int64_t row0;
    void* y;
    int expert, rows, n, ld_y;
    const float* scales[2] = {nullptr, nullptr};  // FP8 weights' block scales
  };
  // y[i, column + j] of the expert's rows i for each listed weight of each expert with rows (one
  // problem each); y rows are y_width elements of element bytes.
  static std::vector<Problem> per_expert(const std::vector<ExpertPointers>& experts,
                                         const std::vector<int32_t>& offsets,
                                         std::initializer_list<std::pair<const void* ExpertPointers::*, int64_t>> weights,
                                         int64_t n, void* y, int64_t y_width, size_t element);
  // On the bf16 wgmma kernel over x, or with fp8 on the FP8 one over its rows (x unused).
  void run_wgmma(const std::vector<Problem>& problems, const WgmmaEpilogue& epilogue, const void* x, int64_t x_rows,
                 int64_t k, cudaStream_t stream, const Fp8Rows* fp8 = nullptr);
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
  // TMA descriptions of the expert weights, by (weight, rows, k, box rows): weights outlive the steps.
  std::map<std::tuple<const void*, int64_t, int64_t, int>, CUtensorMap> weight_maps_;
};

}  // namespace deepinfer::kernels::cuda
