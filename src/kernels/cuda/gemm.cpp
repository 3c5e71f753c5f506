// cuBLASLt plans (descriptors, layouts, algorithm) cached per shape, dtype and alignment.
#include "kernels/cuda/gemm.h"

#include <algorithm>
#include <string>

#include "core/check.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/gemm_fp8_swapped.h"
#include "kernels/cuda/gemv.h"
#include "kernels/cuda/gemv_fp8.h"

namespace deepinfer::kernels::cuda {
namespace {

constexpr size_t kWorkspaceBytes = size_t{64} << 20;
// The M the invariant mode's algorithm is chosen for; it must then run every M.
constexpr int64_t kPinnedRows = 256;

cudaDataType_t cuda_type(DType dtype) {
  switch (dtype) {
    case DType::kBF16: return CUDA_R_16BF;
    case DType::kF16: return CUDA_R_16F;
    case DType::kF8E4M3: return CUDA_R_8F_E4M3;
    default: return CUDA_R_32F;
  }
}

// Largest power of two (<= 256) dividing the address.
int pointer_alignment(const void* p) {
  const auto address = reinterpret_cast<uintptr_t>(p);
  int alignment = 256;
  while (alignment > 4 && address % static_cast<uintptr_t>(alignment) != 0) alignment /= 2;
  return alignment;
}

}  // namespace

struct LtGemm::Plan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr;  // the weight: column-major [K, N], used transposed
  cublasLtMatrixLayout_t b = nullptr;  // x: column-major [K, M]
  cublasLtMatrixLayout_t c = nullptr;  // y: column-major [N, M] float32
  cublasLtMatmulAlgo_t algo{};
  ~Plan() {
    if (c != nullptr) cublasLtMatrixLayoutDestroy(c);
    if (b != nullptr) cublasLtMatrixLayoutDestroy(b);
    if (a != nullptr) cublasLtMatrixLayoutDestroy(a);
    if (desc != nullptr) cublasLtMatmulDescDestroy(desc);
  }
};

LtGemm::LtGemm(bool batch_invariant) : batch_invariant_(batch_invariant) {
  DI_CUBLAS_CHECK(cublasLtCreate(&handle_));
  DI_CUDA_CHECK(cudaMalloc(&workspace_, kWorkspaceBytes));
  workspace_bytes_ = kWorkspaceBytes;
}

LtGemm::~LtGemm() {
  plans_.clear();
  if (workspace_ != nullptr) cudaFree(workspace_);
  if (handle_ != nullptr) cublasLtDestroy(handle_);
}

GrowingBuffer::~GrowingBuffer() {
  if (block_ != nullptr) cudaFree(block_);
  for (void* p : retired_) cudaFree(p);
}

void* GrowingBuffer::get(size_t bytes) {
  if (bytes > bytes_) {
    if (block_ != nullptr) retired_.push_back(block_);
    block_ = nullptr;
    const size_t wanted = std::max(bytes, 2 * bytes_);
    const size_t rounded = (wanted + (size_t{1} << 20) - 1) & ~((size_t{1} << 20) - 1);
    DI_CUDA_CHECK(cudaMalloc(&block_, rounded));
    bytes_ = rounded;
  }
  return block_;
}

void LtGemm::bind_block_scales(const Plan& plan, const BlockScales& scales) {
  DI_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &scales.weight,
                                                 sizeof(scales.weight)));
  DI_CUBLAS_CHECK(
      cublasLtMatmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &scales.x, sizeof(scales.x)));
}

const LtGemm::Plan* LtGemm::plan_for(int64_t m, int64_t n, int64_t k, DType dtype, int align_x, int align_y,
                                     const BlockScales* scales) {
  if (batch_invariant_) {
    align_x = 4;
    align_y = 4;
  }
  const Key key{m, n, k, static_cast<int>(dtype), align_x, align_y};
  if (auto it = plans_.find(key); it != plans_.end()) return it->second.get();
  auto plan = std::make_unique<Plan>();
  const cudaDataType_t in_type = cuda_type(dtype);
  DI_CUBLAS_CHECK(cublasLtMatmulDescCreate(&plan->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  const bool block_scaled = dtype == DType::kF8E4M3;
  DI_CHECK(!block_scaled || (scales != nullptr && !batch_invariant_), "plan_for: FP8 needs its block scales");
  if (block_scaled) {
    const cublasLtMatmulMatrixScale_t weight_mode = CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F;
    const cublasLtMatmulMatrixScale_t x_mode = CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F;
    DI_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &weight_mode,
                                                   sizeof(weight_mode)));
    DI_CUBLAS_CHECK(
        cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &x_mode, sizeof(x_mode)));
    bind_block_scales(*plan, *scales);
  }
  const cublasOperation_t transpose = CUBLAS_OP_T;
  const cublasOperation_t none = CUBLAS_OP_N;
  DI_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_TRANSA, &transpose,
                                                 sizeof(transpose)));
  DI_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(plan->desc, CUBLASLT_MATMUL_DESC_TRANSB, &none, sizeof(none)));
  DI_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan->a, in_type, static_cast<uint64_t>(k), static_cast<uint64_t>(n), k));
  DI_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&plan->b, in_type, static_cast<uint64_t>(k), static_cast<uint64_t>(m), k));
  DI_CUBLAS_CHECK(
      cublasLtMatrixLayoutCreate(&plan->c, CUDA_R_32F, static_cast<uint64_t>(n), static_cast<uint64_t>(m), n));

  const auto pinned_key = std::make_tuple(n, k, static_cast<int>(dtype));
  if (batch_invariant_ && m != kPinnedRows && pinned_.count(pinned_key) == 0) {
    plan_for(kPinnedRows, n, k, dtype, 4, 4, scales);
  }
  if (batch_invariant_ && pinned_.count(pinned_key) != 0) {
    plan->algo = pinned_.at(pinned_key);
    cublasLtMatmulHeuristicResult_t check{};
    DI_CUBLAS_CHECK(cublasLtMatmulAlgoCheck(handle_, plan->desc, plan->a, plan->b, plan->c, plan->c, &plan->algo,
                                            &check));
  } else {
    cublasLtMatmulPreference_t preference = nullptr;
    DI_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&preference));
    const uint64_t max_workspace = batch_invariant_ ? 0 : workspace_bytes_;
    const uint32_t weight_alignment = 256;
    const auto x_alignment = static_cast<uint32_t>(align_x);
    const auto y_alignment = static_cast<uint32_t>(align_y);
    cublasLtMatmulPreferenceSetAttribute(preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &max_workspace,
                                         sizeof(max_workspace));
    cublasLtMatmulPreferenceSetAttribute(preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &weight_alignment,
                                         sizeof(weight_alignment));
    cublasLtMatmulPreferenceSetAttribute(preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &x_alignment,
                                         sizeof(x_alignment));
    cublasLtMatmulPreferenceSetAttribute(preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &y_alignment,
                                         sizeof(y_alignment));
    cublasLtMatmulPreferenceSetAttribute(preference, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &y_alignment,
                                         sizeof(y_alignment));
    cublasLtMatmulHeuristicResult_t results[8];
    int found = 0;
    const cublasStatus_t status = cublasLtMatmulAlgoGetHeuristic(handle_, plan->desc, plan->a, plan->b, plan->c,
                                                                 plan->c, preference, 8, results, &found);
    cublasLtMatmulPreferenceDestroy(preference);
    // A block-scaled shape cuBLASLt does not take is remembered as such: its caller dequantises.
    if (block_scaled && (status != CUBLAS_STATUS_SUCCESS || found == 0)) {
      return plans_.emplace(key, nullptr).first->second.get();
    }
    DI_CUBLAS_CHECK(status);
    if (found == 0) {
      throw CudaError("cuBLASLt has no algorithm for a " + std::to_string(m) + "x" + std::to_string(n) + "x" +
                      std::to_string(k) + " product with " + std::string(dtype_name(dtype)) + " weights");
    }
    int chosen = 0;
    if (batch_invariant_) {
      // Without workspace no algorithm splits K across blocks; still pin the first one whose
      // split count is 1, so the reduction order is the kernel's own.
      for (int i = 0; i < found; ++i) {
        int32_t split_k = 1;
        size_t written = 0;
        cublasLtMatmulAlgoConfigGetAttribute(&results[i].algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &split_k,
                                             sizeof(split_k), &written);
        if (split_k <= 1) {
          chosen = i;
          break;
        }
      }
      pinned_[pinned_key] = results[chosen].algo;
    }
    plan->algo = results[chosen].algo;
  }
  return plans_.emplace(key, std::move(plan)).first->second.get();
}

void* LtGemm::stage(const float* source, int64_t count, DType dtype, const OpStream& stream) {
  void* buffer = input_buffer(count, dtype);
  staged_ = Staged{source, count, dtype, stream.generation()};
  return buffer;
}

void* LtGemm::input_buffer(int64_t count, DType dtype) {
  staged_ = Staged{};
  return cast_.get(static_cast<size_t>(count) * dtype_size_bytes(dtype));
}

void LtGemm::matmul(const float* x, const WeightView& w, int64_t num_rows, float* y, const OpStream& stream,
                    const WeightView& bias) {
  if (num_rows == 0) return;
  const int64_t k = w.cols;
  // y is about to change: a staged copy of memory it overlaps goes stale.
  const float* staged_end = staged_.source + staged_.count;
  if (staged_.source != nullptr && y < staged_end && staged_.source < y + num_rows * w.rows) staged_ = Staged{};
  if (w.dtype == DType::kF8E4M3) {
    if (!matmul_fp8(x, w, num_rows, y, stream, bias)) add_bias(y, bias, num_rows, stream.for_products());
    return;
  }
  // Decode-sized batches: a bandwidth-bound kernel beats cuBLASLt's small-M tiles and skips the
  // cast, and adds the bias in its epilogue. Not in invariant mode, where one algorithm serves every M.
  if (!batch_invariant_ && can_gemv(x, w, num_rows)) {
    gemv(x, w, bias, num_rows, y, stream.for_products());
    return;
  }
  const void* b = x;
  if (w.dtype != DType::kF32) {
    if (staged_.source != x || staged_.count != num_rows * k || staged_.dtype != w.dtype ||
        staged_.generation != stream.generation()) {
      cast_from_f32(x, num_rows * k, w.dtype, stage(x, num_rows * k, w.dtype, stream), stream.for_products());
    }
    b = cast_.get(0);
  }
  matmul_cast(b, w, num_rows, y, stream.for_products());
  add_bias(y, bias, num_rows, stream.for_products());
}

bool LtGemm::matmul_fp8(const float* x, const WeightView& w, int64_t num_rows, float* y, const OpStream& stream,
                        const WeightView& bias) {
  const bool aligned_x = reinterpret_cast<uintptr_t>(x) % 16 == 0;
  // 2-64 rows: the swapped wgmma kernel. On an H100 (Llama-3-8B's shapes) it took gate_proj
  // 14336 x 4096 in 22.8-26.4 us at 2-64 rows against fp8_gemv's / cuBLASLt's 25.7-29.7, q_proj
  // 4096 x 4096 in 8.4-12.3 against 10.0-15.6 at 2 and 16-64 rows (7.5 against 8.4 at 8); weights
  // of fewer than kFp8GemvSmallWeight values keep fp8_gemv up to kFp8GemvAlwaysRows rows (k_proj
  // 1024 x 4096 at 8 rows: 5.3 against 8.0 us, where the kernel's K splits cost more than they hide).
  const bool small_weight = w.rows * w.cols < kFp8GemvSmallWeight;
  if (!batch_invariant_ && num_rows >= kFp8SwappedMinRows && !(small_weight && num_rows <= kFp8GemvAlwaysRows) &&
      fp8_swapped_gemm_fits(w, num_rows) && aligned_x) {
    const int64_t k = w.cols;
    const Fp8Rows rows =
        fp8_rows_at(input_buffer(static_cast<int64_t>(fp8_rows_bytes(num_rows, k)), DType::kU8), num_rows, k);
    void* workspace = swapped_.get(fp8_swapped_workspace_bytes(w, num_rows));
    if (workspace != swapped_zeroed_) {
      DI_CUDA_CHECK(cudaMemsetAsync(workspace, 0, kFp8SwappedCounterBytes, stream.for_products()));
      swapped_zeroed_ = workspace;
    }
    quantize_fp8_rows(x, num_rows, k, rows, stream.for_products());
    fp8_swapped_gemm(rows, w, num_rows, y, workspace, stream.for_products());
    return false;
  }
  // One or two rows: the codes widen in registers against float32 x, with no launch to quantise x.
  if (!batch_invariant_ && can_gemv(x, w, num_rows)) {
    gemv(x, w, bias, num_rows, y, stream.for_products());
    return true;
  }
  // fp8_gemv, or cuBLASLt's block-scaled FP8 GEMM: 128 x 128 weight blocks, x's in 1 x 128. On an
  // H100 cuBLASLt's took ~15 us whatever the rows where fp8_gemv's time grows with them (q_proj
  // 4096 x 4096: 15.5 us at 32-256 rows; fp8_gemv 6.7 us at 8, 10.5 at 16, 21.4 at 32; gate_proj
  // 14336 x 4096 at 16 rows: 28.6 against 30.8), so fp8_gemv keeps 16 rows, and 64 for small weights.
  // cuBLASLt reads the weight's scale rows at a stride of K / 128 rounded up to 4 (the checkpoint's
  // are unpadded, so K must be a multiple of 512), and x's scales right only where M is a multiple of
  // 4 (100, 200, 520; wrong at 65 and 201, with the scales' stride padded to 4 too): the last M % 4
  // rows take fp8_gemv.
  const bool lt_layout = w.scale_block_rows == kFp8BlockCols && (w.cols / kFp8BlockCols) % 4 == 0;
  const bool on_gemv = num_rows <= kFp8GemvMaxRows && (!lt_layout || num_rows <= kFp8GemvAlwaysRows || small_weight);
  if (!batch_invariant_ && (on_gemv || lt_layout) && fp8_layout_supported(w) && aligned_x) {
    const int64_t k = w.cols;
    void* workspace = input_buffer(static_cast<int64_t>(fp8_rows_bytes(num_rows, k)), DType::kU8);
    if (on_gemv) {
      const Fp8Rows rows = fp8_rows_at(workspace, num_rows, k);
      quantize_fp8_rows(x, num_rows, k, rows, stream.for_products());
      fp8_gemv(rows, w, num_rows, y, stream.for_products());
      return false;
    }
    const int64_t head = num_rows - num_rows % 4;
    const Fp8Rows rows = fp8_rows_at(workspace, head, k);
    const BlockScales scales{w.scales, rows.scales};
    if (const Plan* plan = plan_for(head, w.rows, k, DType::kF8E4M3, 256, pointer_alignment(y), &scales)) {
      quantize_fp8_rows(x, head, k, rows, stream.for_products());
      bind_block_scales(*plan, scales);
      run(*plan, w.data, rows.codes, y, stream.for_products());
      if (const int64_t tail = num_rows - head; tail > 0) {
        const Fp8Rows tail_rows = fp8_rows_at(static_cast<uint8_t*>(workspace) + fp8_rows_bytes(head, k), tail, k);
        quantize_fp8_rows(x + head * k, tail, k, tail_rows, stream.for_products());
        fp8_gemv(tail_rows, w, tail, y + head * w.rows, stream.for_products());
      }
      return false;
    }
  }
  // No FP8 kernel for this layout: one pass writes the weight as bf16 for cuBLASLt.
  WeightView dense = w;
  dense.dtype = DType::kBF16;
  dense.scales = nullptr;
  dense.data = dequantized_.get(static_cast<size_t>(w.rows * w.cols) * sizeof(uint16_t));
  dequantize_fp8_to_bf16(w, const_cast<void*>(dense.data), stream.for_products());
  matmul(x, dense, num_rows, y, stream, bias);
  return true;
}

void LtGemm::matmul_cast(const void* b, const WeightView& w, int64_t num_rows, float* y, cudaStream_t stream) {
  const int64_t n = w.rows;
  const int64_t k = w.cols;
  run(*plan_for(num_rows, n, k, w.dtype, pointer_alignment(b), pointer_alignment(y)), w.data, b, y, stream);
}

void LtGemm::run(const Plan& plan, const void* w, const void* x, float* y, cudaStream_t stream) {
  const float alpha = 1.0f;
  const float beta = 0.0f;
  DI_CUBLAS_CHECK(cublasLtMatmul(handle_, plan.desc, &alpha, w, plan.a, x, plan.b, &beta, y, plan.c, y, plan.c,
                                 &plan.algo, workspace_, batch_invariant_ ? 0 : workspace_bytes_, stream));
}

}  // namespace deepinfer::kernels::cuda
