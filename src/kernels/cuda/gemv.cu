// Decode-size products (at most kGemvMaxRows rows of x) with BF16/F16 weights, or FP8 e4m3 ones with
// their block scales: a block takes kCols weight rows and each of its warps a quarter of K, streaming
// it with 16-byte loads (kUnroll * kCols in flight per lane); the warps' sums are added in warp order
// (deterministic). x rows are rounded to a 16-bit weight dtype, as the cuBLASLt path does, with
// float32 accumulation; with FP8 weights x stays float32 and each 16 codes' sum (one scale block's
// share) is promoted with its block's scale. Splitting K keeps N / kCols blocks of short-lived warps,
// so even 1024-row projections fill every SM.
// Memory-bound by design: the weights are read once; x comes from L1, each load serving kCols rows.
// Measured on the H200 (docs/benchmarks.md): at M = 8 the arithmetic per weight byte made it
// slower than cuBLASLt, so larger M goes there.
// Launched as a dependent kernel: its first weight loads overlap the previous kernel's tail.
// Stacked gate|up weights take the same kernel with the gated activation as its epilogue (the
// intermediate never goes to memory), and glu_rounded is their activation after a cuBLASLt GEMM.
// A decoder layer's residual adds fold in too (gemv_add: y += the sums).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include "core/check.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/dependent_launch.cuh"
#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/gemv.h"
#include "kernels/cuda/glu.cuh"
#include "kernels/cuda/shared_carveout.h"

namespace deepinfer::kernels::cuda {
namespace {

constexpr int kWarpsPerBlock = 4;
constexpr int kUnroll = 4;
constexpr int kCols = 4;  // output columns per warp

// Weights per 16-byte load.
template <DType kDType>
constexpr int kVec = kDType == DType::kF8E4M3 ? 16 : 8;

// An FP8 weight's block scales (row r, column c: at[(r / block_rows) * row_stride + c / block_cols]);
// unused for 16-bit weights.
struct BlockScales {
  const float* at = nullptr;
  int64_t row_stride = 0;
  int32_t block_rows = 1;
  int32_t block_cols = 1;
};

template <DType kDType>
__device__ __forceinline__ void unpack(const uint4& bits, float (&w)[kVec<kDType>]) {
  const auto* pairs = reinterpret_cast<const uint32_t*>(&bits);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    if constexpr (kDType == DType::kF8E4M3) {
      fp8x4_to_floats(pairs[i], w + 4 * i);
    } else if constexpr (kDType == DType::kBF16) {
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
  if constexpr (kDType == DType::kF8E4M3) {
    return x;
  } else if constexpr (kDType == DType::kBF16) {
    return __bfloat162float(__float2bfloat16_rn(x));
  } else {
    return __half2float(__float2half_rn(x));
  }
}

// What a block does with its sums: store them, add them to y (a residual stream), or (stacked
// gate|up) store act(gate) * up.
enum class Epilogue { kStore, kAdd, kSilu, kGelu };

// A bias added to each ungated output column before it is stored or added (data null: none).
struct Bias {
  const void* data = nullptr;
  DType dtype = DType::kF32;
};

// One block computes kOut adjacent output columns from kW weight rows (kW = kOut, or with a gated
// epilogue kOut gate rows and the kOut up rows n rows further on), so each x load serves kW rows.
template <DType kDType, int kRows, int kW, int kUnrollT, Epilogue kEpilogue, int kMinBlocks = 1>
__global__ void __launch_bounds__(kWarpsPerBlock * 32, kMinBlocks)
    gemv_kernel(const float* __restrict__ x, const uint4* __restrict__ w, BlockScales scales, Bias bias, int64_t n,
                int64_t k, float* __restrict__ y) {
  constexpr bool kGated = kEpilogue == Epilogue::kSilu || kEpilogue == Epilogue::kGelu;
  constexpr bool kScaled = kDType == DType::kF8E4M3;
  constexpr int kOut = kGated ? kW / 2 : kW;
  constexpr int kVecT = kVec<kDType>;
  __shared__ float partial[kWarpsPerBlock][kRows][kW];
  const int64_t col0 = blockIdx.x * int64_t{kOut};
  const int warp = static_cast<int>(threadIdx.x / 32);
  const int lane = static_cast<int>(threadIdx.x % 32);
  const int64_t vecs = k / kVecT;
  const int64_t chunk = (vecs + kWarpsPerBlock - 1) / kWarpsPerBlock;
  const int64_t begin = warp * chunk;
  const int64_t end = min(begin + chunk, vecs);
  const uint4* rows[kW];
  const float* row_scales[kW];
#pragma unroll
  for (int c = 0; c < kW; ++c) {
    // Past n: a duplicate row, not stored. Up rows follow the n gate rows.
    const int64_t col = min(col0 + c % kOut, n - 1);
    const int64_t row = c < kOut ? col : n + col;
    rows[c] = w + row * vecs;
    if constexpr (kScaled) row_scales[c] = scales.at + row / scales.block_rows * scales.row_stride;
  }
  float acc[kRows][kW];
#pragma unroll
  for (int m = 0; m < kRows; ++m) {
#pragma unroll
    for (int c = 0; c < kW; ++c) acc[m][c] = 0.0f;
  }
  uint4 bits[kUnrollT][kW];
  const auto load_weights = [&](int64_t base) {
#pragma unroll
    for (int u = 0; u < kUnrollT; ++u) {
      const int64_t v = base + u * 32;
#pragma unroll
      for (int c = 0; c < kW; ++c) bits[u][c] = v < end ? __ldcs(rows[c] + v) : make_uint4(0, 0, 0, 0);
    }
  };
  // The first weights are in flight before x (the previous kernel's output) is ready.
  load_weights(begin + lane);
  wait_for_previous_grid();
  allow_next_grid();
  for (int64_t base = begin + lane; base < end; base += 32 * kUnrollT) {
    if (base != begin + lane) load_weights(base);
#pragma unroll
    for (int u = 0; u < kUnrollT; ++u) {
      const int64_t v = base + u * 32;
      if (v >= end) break;
      float block_scale[kW];
      if constexpr (kScaled) {
        // A load's codes share one scale block (block_cols is a multiple of 16).
#pragma unroll
        for (int c = 0; c < kW; ++c) block_scale[c] = __ldg(row_scales[c] + v * kVecT / scales.block_cols);
      }
#pragma unroll
      for (int m = 0; m < kRows; ++m) {
        const float4* xv = reinterpret_cast<const float4*>(x + m * k + v * kVecT);
        float xr[kVecT];
#pragma unroll
        for (int q = 0; q < kVecT / 4; ++q) {
          const float4 a = __ldg(xv + q);
          xr[4 * q] = round_to_weight_type<kDType>(a.x);
          xr[4 * q + 1] = round_to_weight_type<kDType>(a.y);
          xr[4 * q + 2] = round_to_weight_type<kDType>(a.z);
          xr[4 * q + 3] = round_to_weight_type<kDType>(a.w);
        }
#pragma unroll
        for (int c = 0; c < kW; ++c) {
          float wf[kVecT];
          unpack<kDType>(bits[u][c], wf);
          if constexpr (kScaled) {
            float block_sum = 0.0f;
#pragma unroll
            for (int i = 0; i < kVecT; ++i) block_sum = fmaf(xr[i], wf[i], block_sum);
            acc[m][c] = fmaf(block_sum, block_scale[c], acc[m][c]);
          } else {
#pragma unroll
            for (int i = 0; i < kVecT; ++i) acc[m][c] = fmaf(xr[i], wf[i], acc[m][c]);
          }
        }
      }
    }
  }
#pragma unroll
  for (int m = 0; m < kRows; ++m) {
#pragma unroll
    for (int c = 0; c < kW; ++c) {
      const float total = warp_sum(acc[m][c]);
      if (lane == 0) partial[warp][m][c] = total;
    }
  }
  __syncthreads();
  if (threadIdx.x < kRows * kOut) {
    const int m = static_cast<int>(threadIdx.x) / kOut;
    const int c = static_cast<int>(threadIdx.x) % kOut;
    float total = sum_over_warps(partial, m, c);
    if constexpr (kGated) {
      total = glu<kEpilogue == Epilogue::kGelu>(total, sum_over_warps(partial, m, c + kOut));
    }
    if (col0 + c < n) {
      // The same sums as the product, add_bias, then add_rms_norm's residual + x.
      if (!kGated && bias.data != nullptr) total += load_as_f32(bias.data, bias.dtype, col0 + c);
      if constexpr (kEpilogue == Epilogue::kAdd) total += y[m * n + col0 + c];
      y[m * n + col0 + c] = total;
    }
  }
}

// Every block reads all of x from L2 beside its weight rows, so with long rows (the down projection)
// that re-read rivals the weights' own L2 traffic: such products give each block twice the rows.
// The per-column order of the sums is the same either way, so the bits are too.
constexpr int64_t kLongRowElements = 8192;

template <DType kDType, int kRows, Epilogue kEpilogue, int kW, int kUnrollT, int kMinBlocks = 1>
void launch_rows(const float* x, const WeightView& w, Bias bias, int64_t n, float* y, cudaStream_t stream) {
  constexpr bool kGated = kEpilogue == Epilogue::kSilu || kEpilogue == Epilogue::kGelu;
  constexpr int kOut = kGated ? kW / 2 : kW;
  const auto blocks = static_cast<unsigned>((n + kOut - 1) / kOut);
  const auto* weights = static_cast<const uint4*>(w.data);
  BlockScales scales;
  if constexpr (kDType == DType::kF8E4M3) {
    scales = BlockScales{static_cast<const float*>(w.scales), block_scale_row_stride(w), w.scale_block_rows,
                         w.scale_block_cols};
  }
  launch_dependent(gemv_kernel<kDType, kRows, kW, kUnrollT, kEpilogue, kMinBlocks>, dim3(blocks),
                   dim3(kWarpsPerBlock * 32), 0, stream, x, weights, scales, bias, n, w.cols, y);
}

template <DType kDType, Epilogue kEpilogue, int kW, int kUnrollT>
void launch_shape(const float* x, const WeightView& w, Bias bias, int64_t n, int64_t num_rows, float* y,
                  cudaStream_t stream) {
  num_rows == 1 ? launch_rows<kDType, 1, kEpilogue, kW, kUnrollT>(x, w, bias, n, y, stream)
                : launch_rows<kDType, 2, kEpilogue, kW, kUnrollT>(x, w, bias, n, y, stream);
}

// Blocks of kCols rows the GPU holds at once.
template <DType kDType, Epilogue kEpilogue>
int64_t resident_blocks() {
  static const int64_t blocks = [] {
    int per_sm = 0;
    DI_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(
        &per_sm, gemv_kernel<kDType, 1, kCols, kUnroll, kEpilogue>, kWarpsPerBlock * 32, 0));
    return int64_t{per_sm} * multiprocessor_count();
  }();
  return blocks;
}

// n: output columns (the gate rows when gated). Gated blocks read twice the rows (gate and up), as
// do long-row blocks; twice the rows take half the unroll, so each lane keeps the same loads in flight.
// A product whose blocks of kCols rows would need a second wave but whose blocks of twice that fit
// in one (o_proj's 4096 rows on the H200's 132 SMs) takes the longer blocks too: the second wave's
// tail cost more (H200, Llama-3-8B at batch 1: 236 against 233 tok/s; docs/benchmarks.md). FP8
// weights always do: a byte of them meets four of x, twice a 16-bit weight's share. One FP8 row
// keeps one load a row in flight per lane, under 128 registers, so four blocks share an SM instead
// of three (167 registers): on an H100, q_proj 4096 x 4096 took 5.9 us instead of 8.9 and down_proj
// 14336 -> 4096 20.2 instead of 26.2 (docs/benchmarks.md). Two rows would spill there.
template <DType kDType, Epilogue kEpilogue>
void launch(const float* x, const WeightView& w, Bias bias, int64_t n, int64_t num_rows, float* y,
            cudaStream_t stream) {
  if constexpr (kDType == DType::kF8E4M3) {
    num_rows == 1 ? launch_rows<kDType, 1, kEpilogue, 2 * kCols, kUnroll / 4, 4>(x, w, bias, n, y, stream)
                  : launch_rows<kDType, 2, kEpilogue, 2 * kCols, kUnroll / 2>(x, w, bias, n, y, stream);
  } else if constexpr (kEpilogue == Epilogue::kSilu || kEpilogue == Epilogue::kGelu) {
    launch_shape<kDType, kEpilogue, 2 * kCols, kUnroll / 2>(x, w, bias, n, num_rows, y, stream);
  } else {
    const auto one_wave_of_long_blocks = [&] {
      const int64_t slots = resident_blocks<kDType, kEpilogue>();
      return (n + kCols - 1) / kCols > slots && (n + 2 * kCols - 1) / (2 * kCols) <= slots;
    };
    if (w.cols >= kLongRowElements || one_wave_of_long_blocks()) {
      launch_shape<kDType, kEpilogue, 2 * kCols, kUnroll / 2>(x, w, bias, n, num_rows, y, stream);
    } else {
      launch_shape<kDType, kEpilogue, kCols, kUnroll>(x, w, bias, n, num_rows, y, stream);
    }
  }
}

template <Epilogue kEpilogue>
void launch_for_dtype(const float* x, const WeightView& w, int64_t n, int64_t num_rows, float* y, cudaStream_t stream,
                      Bias bias = {}) {
  switch (w.dtype) {
    case DType::kBF16:
      return launch<DType::kBF16, kEpilogue>(x, w, bias, n, num_rows, y, stream);
    case DType::kF16:
      return launch<DType::kF16, kEpilogue>(x, w, bias, n, num_rows, y, stream);
    default:
      return launch<DType::kF8E4M3, kEpilogue>(x, w, bias, n, num_rows, y, stream);
  }
}

template <bool kGelu, typename In, typename Out>
__global__ void glu_rounded_kernel(const In* gate_up, int64_t count, int64_t intermediate, Out* out) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < count; i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t r = i / intermediate;
    const int64_t c = i - r * intermediate;
    const In* row = gate_up + r * 2 * intermediate;
    out[i] = from_float<Out>(glu<kGelu>(to_float(row[c]), to_float(row[intermediate + c])));
  }
}

template <bool kGelu, typename In>
void launch_glu_rounded(const In* gate_up, int64_t count, int64_t intermediate, DType dtype, void* out,
                        cudaStream_t stream) {
  constexpr int kThreads = 256;
  if (dtype == DType::kBF16) {
    glu_rounded_kernel<kGelu><<<grid_for(count, kThreads), kThreads, 0, stream>>>(
        gate_up, count, intermediate, static_cast<__nv_bfloat16*>(out));
  } else {
    glu_rounded_kernel<kGelu><<<grid_for(count, kThreads), kThreads, 0, stream>>>(gate_up, count, intermediate,
                                                                                 static_cast<__half*>(out));
  }
  DI_CUDA_CHECK_LAUNCH("glu_rounded_kernel");
}

template <bool kGelu>
void launch_glu_rounded(const void* gate_up, DType gate_up_dtype, int64_t count, int64_t intermediate, DType dtype,
                        void* out, cudaStream_t stream) {
  switch (gate_up_dtype) {
    case DType::kF32:
      return launch_glu_rounded<kGelu>(static_cast<const float*>(gate_up), count, intermediate, dtype, out, stream);
    case DType::kBF16:
      return launch_glu_rounded<kGelu>(static_cast<const __nv_bfloat16*>(gate_up), count, intermediate, dtype, out,
                                       stream);
    case DType::kF16:
      return launch_glu_rounded<kGelu>(static_cast<const __half*>(gate_up), count, intermediate, dtype, out, stream);
    default: DI_CHECK(false, "glu_rounded: gate|up of " << dtype_name(gate_up_dtype));
  }
}

}  // namespace

bool can_gemv(const float* x, const WeightView& w, int64_t num_rows) {
  const auto aligned = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
  const bool fp8 = w.dtype == DType::kF8E4M3 && w.scales != nullptr && w.scale_block_rows > 0 &&
                   w.scale_block_cols > 0 && w.scale_block_cols % kVec<DType::kF8E4M3> == 0;
  const bool sixteen_bit = w.dtype == DType::kBF16 || w.dtype == DType::kF16;
  return num_rows >= 1 && num_rows <= kGemvMaxRows && (fp8 || sixteen_bit) &&
         w.cols % (fp8 ? kVec<DType::kF8E4M3> : kVec<DType::kBF16>) == 0 && aligned(x) && aligned(w.data);
}

void gemv(const float* x, const WeightView& w, const WeightView& bias, int64_t num_rows, float* y,
          cudaStream_t stream) {
  DI_CHECK(bias.data == nullptr || bias.rows * bias.cols == w.rows,
           "gemv: a bias of " << bias.rows * bias.cols << " values for " << w.rows << " output columns");
  launch_for_dtype<Epilogue::kStore>(x, w, w.rows, num_rows, y, stream, Bias{bias.data, bias.dtype});
}

void gemv_glu(const float* x, const WeightView& gate_up, int64_t num_rows, bool gelu, float* out,
              cudaStream_t stream) {
  DI_CHECK(gate_up.rows % 2 == 0, "gemv_glu: stacked gate|up weight has an odd row count " << gate_up.rows);
  if (gelu) {
    launch_for_dtype<Epilogue::kGelu>(x, gate_up, gate_up.rows / 2, num_rows, out, stream);
  } else {
    launch_for_dtype<Epilogue::kSilu>(x, gate_up, gate_up.rows / 2, num_rows, out, stream);
  }
}

void gemv_add(const float* x, const WeightView& w, int64_t num_rows, float* residual, cudaStream_t stream) {
  launch_for_dtype<Epilogue::kAdd>(x, w, w.rows, num_rows, residual, stream);
}

void glu_rounded(const void* gate_up, DType gate_up_dtype, int64_t num_rows, int64_t intermediate, bool gelu,
                 DType dtype, void* out, cudaStream_t stream) {
  const int64_t count = num_rows * intermediate;
  if (count == 0) return;
  if (gelu) {
    launch_glu_rounded<true>(gate_up, gate_up_dtype, count, intermediate, dtype, out, stream);
  } else {
    launch_glu_rounded<false>(gate_up, gate_up_dtype, count, intermediate, dtype, out, stream);
  }
}

}  // namespace deepinfer::kernels::cuda
