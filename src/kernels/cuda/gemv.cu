// Decode-size products (at most kGemvMaxRows rows of x) with BF16/F16 weights: a block takes kCols
// weight rows and each of its warps a quarter of K, streaming it with 16-byte loads (kUnroll * kCols
// in flight per lane); the warps' sums are added in warp order (deterministic). x rows are rounded
// to the weight dtype, as the cuBLASLt path does, with float32 accumulation. Splitting K keeps
// N / kCols blocks of short-lived warps, so even 1024-row projections fill every SM.
// Memory-bound by design: the weights are read once; x comes from L1, each load serving kCols rows.
// Measured on the H200 (docs/benchmarks.md): at M = 8 the arithmetic per weight byte made it
// slower than cuBLASLt, so larger M goes there.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/gemv.h"

namespace deepinfer::kernels::cuda {
namespace {

constexpr int kWarpsPerBlock = 4;
constexpr int kUnroll = 4;
constexpr int kCols = 4;  // output columns per warp
constexpr int kVec = 8;  // weights per 16-byte load

template <DType kDType>
__device__ __forceinline__ void unpack(const uint4& bits, float (&w)[kVec]) {
  const auto* pairs = reinterpret_cast<const uint32_t*>(&bits);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    if constexpr (kDType == DType::kBF16) {
      const __nv_bfloat162 p = *reinterpret_cast<const __nv_bfloat162*>(&pairs[i]);
      const float2 f = __bfloat1622float2(p);
      w[2 * i] = f.x;
      w[2 * i + 1] = f.y;
    } else {
      const __half2 p = *reinterpret_cast<const __half2*>(&pairs[i]);
      const float2 f = __half22float2(p);
      w[2 * i] = f.x;
      w[2 * i + 1] = f.y;
    }
  }
}

template <DType kDType>
__device__ __forceinline__ float round_to_weight_type(float x) {
  if constexpr (kDType == DType::kBF16) {
    return __bfloat162float(__float2bfloat16_rn(x));
  } else {
    return __half2float(__float2half_rn(x));
  }
}

// One block computes kCols adjacent output columns, so each x load serves kCols weight rows.
template <DType kDType, int kRows>
__global__ void __launch_bounds__(kWarpsPerBlock * 32) gemv_kernel(const float* __restrict__ x,
                                                                   const uint4* __restrict__ w, int64_t n,
                                                                   int64_t k, float* __restrict__ y) {
  __shared__ float partial[kWarpsPerBlock][kRows][kCols];
  const int64_t col0 = blockIdx.x * int64_t{kCols};
  const int warp = static_cast<int>(threadIdx.x / 32);
  const int lane = static_cast<int>(threadIdx.x % 32);
  const int64_t vecs = k / kVec;
  const int64_t chunk = (vecs + kWarpsPerBlock - 1) / kWarpsPerBlock;
  const int64_t begin = warp * chunk;
  const int64_t end = min(begin + chunk, vecs);
  const uint4* rows[kCols];
#pragma unroll
  for (int c = 0; c < kCols; ++c) rows[c] = w + min(col0 + c, n - 1) * vecs;  // past n: a duplicate, not stored
  float acc[kRows][kCols];
#pragma unroll
  for (int m = 0; m < kRows; ++m) {
#pragma unroll
    for (int c = 0; c < kCols; ++c) acc[m][c] = 0.0f;
  }
  for (int64_t base = begin + lane; base < end; base += 32 * kUnroll) {
    uint4 bits[kUnroll][kCols];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t v = base + u * 32;
#pragma unroll
      for (int c = 0; c < kCols; ++c) bits[u][c] = v < end ? __ldcs(rows[c] + v) : make_uint4(0, 0, 0, 0);
    }
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      const int64_t v = base + u * 32;
      if (v >= end) break;
#pragma unroll
      for (int m = 0; m < kRows; ++m) {
        const float4* xv = reinterpret_cast<const float4*>(x + m * k + v * kVec);
        const float4 a = __ldg(xv);
        const float4 b = __ldg(xv + 1);
        const float xs[kVec] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
        float xr[kVec];
#pragma unroll
        for (int i = 0; i < kVec; ++i) xr[i] = round_to_weight_type<kDType>(xs[i]);
#pragma unroll
        for (int c = 0; c < kCols; ++c) {
          float wf[kVec];
          unpack<kDType>(bits[u][c], wf);
#pragma unroll
          for (int i = 0; i < kVec; ++i) acc[m][c] = fmaf(xr[i], wf[i], acc[m][c]);
        }
      }
    }
  }
#pragma unroll
  for (int m = 0; m < kRows; ++m) {
#pragma unroll
    for (int c = 0; c < kCols; ++c) {
      const float total = warp_sum(acc[m][c]);
      if (lane == 0) partial[warp][m][c] = total;
    }
  }
  __syncthreads();
  if (threadIdx.x < kRows * kCols) {
    const int m = static_cast<int>(threadIdx.x) / kCols;
    const int c = static_cast<int>(threadIdx.x) % kCols;
    float total = partial[0][m][c];
#pragma unroll
    for (int i = 1; i < kWarpsPerBlock; ++i) total += partial[i][m][c];
    if (col0 + c < n) y[m * n + col0 + c] = total;
  }
}

template <DType kDType>
void launch(const float* x, const WeightView& w, int64_t num_rows, float* y, cudaStream_t stream) {
  const auto blocks = static_cast<unsigned>((w.rows + kCols - 1) / kCols);
  const auto* weights = static_cast<const uint4*>(w.data);
  const dim3 grid(blocks);
  const dim3 block(kWarpsPerBlock * 32);
  switch (num_rows) {
    case 1: gemv_kernel<kDType, 1><<<grid, block, 0, stream>>>(x, weights, w.rows, w.cols, y); break;
    default: gemv_kernel<kDType, 2><<<grid, block, 0, stream>>>(x, weights, w.rows, w.cols, y); break;
  }
  DI_CUDA_CHECK_LAUNCH("gemv_kernel");
}

}  // namespace

bool can_gemv(const float* x, const WeightView& w, int64_t num_rows) {
  const auto aligned = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
  return num_rows >= 1 && num_rows <= kGemvMaxRows && (w.dtype == DType::kBF16 || w.dtype == DType::kF16) &&
         w.cols % kVec == 0 && aligned(x) && aligned(w.data);
}

void gemv(const float* x, const WeightView& w, int64_t num_rows, float* y, cudaStream_t stream) {
  if (w.dtype == DType::kBF16) {
    launch<DType::kBF16>(x, w, num_rows, y, stream);
  } else {
    launch<DType::kF16>(x, w, num_rows, y, stream);
  }
}

}  // namespace deepinfer::kernels::cuda
