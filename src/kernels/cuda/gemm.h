// Linear layers through cuBLASLt: y[M, N] = x[M, K] @ w[N, K]^T with float32 x and y. BF16/F16
// weights: x is cast to the weight's dtype by a small kernel and the product runs on the tensor
// cores with float32 accumulation and output; F32 weights: plain float32 GEMM (TF32 off).
#pragma once

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <map>
#include <memory>
#include <tuple>
#include <vector>

#include "kernels/ops.h"

namespace deepinfer::kernels::cuda {

// The stream a backend enqueues all its work on, counting the enqueues that may write device
// memory. LtGemm's cast buffer stands for a rounded copy of some x only while that count is what it
// was when the copy was made, so no write can leave the copy stale unseen: every op takes the
// stream through for_op(), and writes that enqueue through another object (the pinned staging
// of host uploads) call begin_write() first; only LtGemm's own products and staging casts, which
// write nothing but their output and the cast buffer, take it through for_products().
class OpStream {
 public:
  OpStream() = default;
  explicit OpStream(cudaStream_t stream) : stream_(stream) {}
  cudaStream_t for_op() {
    begin_write();
    return stream_;
  }
  void begin_write() { ++generation_; }
  // Enqueues go to stream from now on (a backend's side stream, and back). Counted as a write: a
  // cast copy made on the other stream is made again on this one.
  void switch_to(cudaStream_t stream) {
    begin_write();
    stream_ = stream;
  }
  cudaStream_t for_products() const { return stream_; }
  uint64_t generation() const { return generation_; }

 private:
  cudaStream_t stream_ = nullptr;
  uint64_t generation_ = 0;
};

// A device buffer that only grows: an outgrown block stays allocated until the destructor, since
// captured graphs replay products that read it; doubling bounds what is kept to the newest size.
class GrowingBuffer {
 public:
  GrowingBuffer() = default;
  ~GrowingBuffer();
  GrowingBuffer(const GrowingBuffer&) = delete;
  GrowingBuffer& operator=(const GrowingBuffer&) = delete;
  void* get(size_t bytes);

 private:
  void* block_ = nullptr;
  size_t bytes_ = 0;
  std::vector<void*> retired_;
};

class LtGemm {
 public:
  // batch_invariant: one algorithm per (N, K, dtype), without split-K, for every M and pointer
  // alignment, so a row's result never depends on the other rows. Otherwise cuBLASLt's heuristic
  // choice per (M, N, K, dtype, alignment), cached.
  explicit LtGemm(bool batch_invariant);
  ~LtGemm();
  LtGemm(const LtGemm&) = delete;
  LtGemm& operator=(const LtGemm&) = delete;

  // Enqueues the product on stream. x, y: device float32; w: device weight (F32, BF16 or F16, or
  // block-scaled F8E4M3: gemv.h's kernel for one row, gemm_fp8_swapped.h's for 2-64 rows (but
  // small weights up to 16 rows: gemv.h's at two, then gemv_fp8.h's), gemv_fp8.h's up to its row
  // limit where the swapped kernel does not fit, then cuBLASLt's block-scaled FP8 GEMM over x
  // quantised as gemv_fp8.h does (128 x 128 blocks, K a multiple of 512); shapes none takes are
  // dequantised to bf16 first). bias ([w.rows]; data null: none) is added to every row, in gemv.h's
  // epilogue where that kernel runs the product, else by add_bias after it.
  // Not thread-safe (one stream, shared buffers).
  void matmul(const float* x, const WeightView& w, int64_t num_rows, float* y, const OpStream& stream,
              const WeightView& bias = WeightView{});
  // The same product with x already in w's dtype (x: [num_rows, K] device). The GEMM probe's path.
  void matmul_cast(const void* x, const WeightView& w, int64_t num_rows, float* y, cudaStream_t stream);

  // The cast buffer remembers whose values it holds until stream's next op (OpStream): matmul of
  // the same x (q, k and v of one normed input) casts once, and a kernel that makes x (a norm) can
  // write the rounded copy there itself. stage: room for count elements of dtype that the caller
  // fills with source rounded to dtype, enqueued on stream after its last for_op().
  void* stage(const float* source, int64_t count, DType dtype, const OpStream& stream);
  // Room for count elements of dtype for matmul_cast; the buffer no longer stands for any x.
  void* input_buffer(int64_t count, DType dtype);

 private:
  struct Plan;
  using Key = std::tuple<int64_t, int64_t, int64_t, int, int, int>;  // m, n, k, dtype, align x, align y

  // The weight's and x's float32 block scales of an FP8 product (gemv_fp8.h's layouts).
  struct BlockScales {
    const void* weight = nullptr;
    const void* x = nullptr;
  };
  // The plan of one product, made on first use. FP8 (block-scaled, scales required, not in invariant
  // mode): null where cuBLASLt has no algorithm for the shape; other dtypes throw there.
  const Plan* plan_for(int64_t m, int64_t n, int64_t k, DType dtype, int align_x, int align_y,
                       const BlockScales* scales = nullptr);
  static void bind_block_scales(const Plan& plan, const BlockScales& scales);
  // Enqueues plan's product y = x @ w^T.
  void run(const Plan& plan, const void* w, const void* x, float* y, cudaStream_t stream);
  // matmul for FP8 weights; true where bias is in y already (the GEMV's epilogue, or the bf16
  // fallback's matmul), false where the caller still adds it.
  bool matmul_fp8(const float* x, const WeightView& w, int64_t num_rows, float* y, const OpStream& stream,
                  const WeightView& bias);

  // What the cast buffer holds: source[0, count) rounded to dtype, as of the stream's generation;
  // source null when nothing.
  struct Staged {
    const float* source = nullptr;
    int64_t count = 0;
    DType dtype = DType::kF32;
    uint64_t generation = 0;
  };

  bool batch_invariant_;
  cublasLtHandle_t handle_ = nullptr;
  void* workspace_ = nullptr;
  size_t workspace_bytes_ = 0;
  GrowingBuffer cast_;
  GrowingBuffer dequantized_;  // an FP8 weight as bf16, for layouts no FP8 kernel takes
  GrowingBuffer swapped_;      // fp8_swapped_gemm's workspace
  void* swapped_zeroed_ = nullptr;  // the block of swapped_ whose counters are zero
  Staged staged_;
  std::map<Key, std::unique_ptr<Plan>> plans_;
  std::map<std::tuple<int64_t, int64_t, int>, cublasLtMatmulAlgo_t> pinned_;  // (n, k, dtype) in invariant mode
};

}  // namespace deepinfer::kernels::cuda
