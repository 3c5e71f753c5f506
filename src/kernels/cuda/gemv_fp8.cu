// FP8 block-scaled products (gemv_fp8.h). fp8_gemv: a block takes 16 weight rows and its warps split
// K in 128-column blocks; each 64-column piece of a weight row is one 16-byte load per lane, which
// the m16n8k32 e4m3 instruction reads with its K order permuted (lane t holds columns 16t..16t+15 of
// the piece, as two k=32 products); x's codes are loaded in the same permuted order, so every
// product pairs the right columns. The 128 columns of a scale block accumulate in the tensor core
// and are promoted to float32 with both scales; the warps' sums are added in warp order. The weight
// loads of a warp's first blocks are issued before the dependent-launch wait.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include "core/check.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/dependent_launch.cuh"
#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/gemv_fp8.h"

namespace deepinfer::kernels::cuda {
namespace {

constexpr int kWarps = 8;
constexpr int kTileRows = 16;      // weight rows of a block: the m16 of the instruction
constexpr int kTokensPerTile = 8;  // x rows of one product: its n8
constexpr int kVecsPerBlock = 8;   // 16-byte vectors in 128 columns

// c[16x8] += a[16x32] b[32x8], e4m3 inputs, float32 accumulation (PTX ISA's m16n8k32 layouts).
__device__ __forceinline__ void mma_e4m3(float (&c)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0,
                                         uint32_t b1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
  asm volatile(
      "mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
#endif
}

// A warp's 128-column block of x (v: the lane's 4 values) as e4m3 codes of x * 448 / amax (the
// lane's 4 in one word); returns the block's scale, amax / 448.
__device__ __forceinline__ float quantize_block(const float4 v, uint32_t& codes) {
  const float amax = warp_max(fmaxf(fmaxf(fabsf(v.x), fabsf(v.y)), fmaxf(fabsf(v.z), fabsf(v.w))));
  const float inverse = amax > 0.0f ? kF8E4M3Max / amax : 0.0f;
  const uint32_t lo = __nv_cvt_float2_to_fp8x2(make_float2(v.x * inverse, v.y * inverse), __NV_SATFINITE, __NV_E4M3);
  const uint32_t hi = __nv_cvt_float2_to_fp8x2(make_float2(v.z * inverse, v.w * inverse), __NV_SATFINITE, __NV_E4M3);
  codes = lo | (hi << 16);
  return amax / kF8E4M3Max;
}

// One warp per (row, 128-column block), scales stored [K / 128, num_rows].
__global__ void quantize_rows_kernel(const float* __restrict__ x, int64_t num_rows, int64_t k,
                                     uint32_t* __restrict__ codes, float* __restrict__ scales) {
  const int64_t blocks_per_row = k / kFp8BlockCols;
  const int64_t item = blockIdx.x * int64_t{blockDim.x / 32} + threadIdx.x / 32;
  const int lane = static_cast<int>(threadIdx.x % 32);
  // The product after us may launch now and stream its weights while the kernel before us ends:
  // it waits for us, and we for that kernel, before anything is read.
  allow_next_grid();
  wait_for_previous_grid();
  if (item >= num_rows * blocks_per_row) return;
  uint32_t packed = 0;
  const float scale = quantize_block(reinterpret_cast<const float4*>(x)[item * 32 + lane], packed);
  codes[item * 32 + lane] = packed;
  if (lane == 0) scales[(item % blocks_per_row) * num_rows + item / blocks_per_row] = scale;
}

// One warp per (token, 128-column block), written to each of the token's grouped rows (num_rows of
// them in all).
__global__ void quantize_grouped_rows_kernel(const float* __restrict__ x, const int32_t* __restrict__ position,
                                             int64_t num_tokens, int32_t top_k, int64_t k, uint32_t* __restrict__ codes,
                                             float* __restrict__ scales, int64_t num_rows) {
  const int64_t blocks_per_row = k / kFp8BlockCols;
  const int64_t item = blockIdx.x * int64_t{blockDim.x / 32} + threadIdx.x / 32;
  const int lane = static_cast<int>(threadIdx.x % 32);
  if (item >= num_tokens * blocks_per_row) return;
  const int64_t token = item / blocks_per_row;
  const int64_t block = item % blocks_per_row;
  uint32_t packed = 0;
  const float scale = quantize_block(reinterpret_cast<const float4*>(x)[item * 32 + lane], packed);
  for (int32_t j = 0; j < top_k; ++j) {
    const int32_t row = position[token * top_k + j];
    if (row < 0) continue;
    codes[(row * blocks_per_row + block) * 32 + lane] = packed;
    if (lane == 0) scales[block * num_rows + row] = scale;
  }
}

template <int kTiles>
__global__ void __launch_bounds__(kWarps * 32)
    fp8_gemv_kernel(const uint4* __restrict__ w, const float* __restrict__ w_scales, int64_t n, int64_t k,
                    int32_t scale_block_rows, const uint4* __restrict__ x_codes, const float* __restrict__ x_scales,
                    int32_t m, float* __restrict__ y) {
  // Blocks of 128 columns whose weight loads are in flight together (x's codes come from L2 as each
  // block is multiplied: loading them with the weights took registers enough to halve the resident
  // warps, and measured slower on the H200).
  constexpr int kAhead = kTiles == 1 ? 4 : kTiles == 2 ? 2 : 1;
  __shared__ float partial[kWarps][kTiles * 4][32];
  const int64_t row0 = blockIdx.x * int64_t{kTileRows};
  const int warp = static_cast<int>(threadIdx.x / 32);
  const int lane = static_cast<int>(threadIdx.x % 32);
  const int g = lane / 4;
  const int t = lane % 4;
  const int64_t k_blocks = k / kFp8BlockCols;
  const int64_t vecs_per_row = k / 16;
  const int64_t per_warp = (k_blocks + kWarps - 1) / kWarps;
  const int64_t begin = warp * per_warp;
  const int64_t end = min(begin + per_warp, k_blocks);
  // Rows past n repeat the last row and are not stored.
  const uint4* row_a = w + min(row0 + g, n - 1) * vecs_per_row + t;
  const uint4* row_b = w + min(row0 + g + 8, n - 1) * vecs_per_row + t;
  const float* block_scales = w_scales + (row0 / scale_block_rows) * k_blocks;

  float out[kTiles][4];
#pragma unroll
  for (int j = 0; j < kTiles; ++j) {
#pragma unroll
    for (int i = 0; i < 4; ++i) out[j][i] = 0.0f;
  }
  // [block][piece 0 row g, piece 0 row g + 8, piece 1 row g, piece 1 row g + 8]
  uint4 a[kAhead][4];
  const auto load_weights = [&](int64_t first) {
#pragma unroll
    for (int u = 0; u < kAhead; ++u) {
      const int64_t v = (first + u) * kVecsPerBlock;
      const bool inside = first + u < end;
      a[u][0] = inside ? __ldcs(row_a + v) : make_uint4(0, 0, 0, 0);
      a[u][1] = inside ? __ldcs(row_b + v) : make_uint4(0, 0, 0, 0);
      a[u][2] = inside ? __ldcs(row_a + v + 4) : make_uint4(0, 0, 0, 0);
      a[u][3] = inside ? __ldcs(row_b + v + 4) : make_uint4(0, 0, 0, 0);
    }
  };
  load_weights(begin);
  wait_for_previous_grid();
  allow_next_grid();
  for (int64_t first = begin; first < end; first += kAhead) {
    if (first != begin) load_weights(first);
#pragma unroll
    for (int u = 0; u < kAhead; ++u) {
      const int64_t kb = first + u;
      if (kb >= end) break;
      const float w_scale = block_scales[kb];
#pragma unroll
      for (int j = 0; j < kTiles; ++j) {
        const int token = j * kTokensPerTile + g;
        const uint4* x_row = x_codes + static_cast<int64_t>(token) * vecs_per_row + kb * kVecsPerBlock + t;
        const uint4 b0 = token < m ? __ldg(x_row) : make_uint4(0, 0, 0, 0);
        const uint4 b1 = token < m ? __ldg(x_row + 4) : make_uint4(0, 0, 0, 0);
        float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        mma_e4m3(acc, a[u][0].x, a[u][1].x, a[u][0].y, a[u][1].y, b0.x, b0.y);
        mma_e4m3(acc, a[u][0].z, a[u][1].z, a[u][0].w, a[u][1].w, b0.z, b0.w);
        mma_e4m3(acc, a[u][2].x, a[u][3].x, a[u][2].y, a[u][3].y, b1.x, b1.y);
        mma_e4m3(acc, a[u][2].z, a[u][3].z, a[u][2].w, a[u][3].w, b1.z, b1.w);
        // acc's columns are the tokens 2t and 2t + 1 of the tile.
        const int token0 = j * kTokensPerTile + 2 * t;
        const float s0 = token0 < m ? w_scale * x_scales[kb * m + token0] : 0.0f;
        const float s1 = token0 + 1 < m ? w_scale * x_scales[kb * m + token0 + 1] : 0.0f;
        out[j][0] = fmaf(acc[0], s0, out[j][0]);
        out[j][1] = fmaf(acc[1], s1, out[j][1]);
        out[j][2] = fmaf(acc[2], s0, out[j][2]);
        out[j][3] = fmaf(acc[3], s1, out[j][3]);
      }
    }
  }
#pragma unroll
  for (int j = 0; j < kTiles; ++j) {
#pragma unroll
    for (int i = 0; i < 4; ++i) partial[warp][j * 4 + i][lane] = out[j][i];
  }
  __syncthreads();
  if (warp != 0) return;
#pragma unroll
  for (int j = 0; j < kTiles; ++j) {
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      float total = partial[0][j * 4 + i][lane];
#pragma unroll
      for (int v = 1; v < kWarps; ++v) total += partial[v][j * 4 + i][lane];
      const int64_t row = row0 + g + (i >= 2 ? 8 : 0);
      const int token = j * kTokensPerTile + 2 * t + (i & 1);
      if (row < n && token < m) y[token * n + row] = total;
    }
  }
}

// Sixteen codes a thread, all in one scale block (scale blocks span a multiple of 16 columns): out
// = code's value times its block's scale, as bf16.
__global__ void dequantize_kernel(const uint4* __restrict__ w, const float* __restrict__ scales, int64_t rows,
                                  int64_t cols, int32_t block_rows, int32_t block_cols,
                                  __nv_bfloat162* __restrict__ out) {
  const int64_t vecs_per_row = cols / 16;
  const int64_t scale_cols = (cols + block_cols - 1) / block_cols;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < rows * vecs_per_row;
       i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t row = i / vecs_per_row;
    const int64_t col = (i - row * vecs_per_row) * 16;
    const float scale = scales[(row / block_rows) * scale_cols + col / block_cols];
    const uint4 bits = w[i];
    const uint32_t words[4] = {bits.x, bits.y, bits.z, bits.w};
    __nv_bfloat162 values[8];
#pragma unroll
    for (int q = 0; q < 8; ++q) {
      const __half2_raw raw = __nv_cvt_fp8x2_to_halfraw2(
          static_cast<__nv_fp8x2_storage_t>((words[q / 2] >> (16 * (q % 2))) & 0xffffu), __NV_E4M3);
      const float2 f = __half22float2(*reinterpret_cast<const __half2*>(&raw));
      values[q] = __floats2bfloat162_rn(f.x * scale, f.y * scale);
    }
    auto* dst = reinterpret_cast<uint4*>(out + i * 8);
    dst[0] = *reinterpret_cast<const uint4*>(&values[0]);
    dst[1] = *reinterpret_cast<const uint4*>(&values[4]);
  }
}

template <int kTiles>
void launch_gemv(const WeightView& w, const Fp8Rows& x, int32_t m, float* y, cudaStream_t stream) {
  const auto blocks = static_cast<unsigned>((w.rows + kTileRows - 1) / kTileRows);
  launch_dependent(fp8_gemv_kernel<kTiles>, dim3(blocks), dim3(kWarps * 32), 0, stream,
                   static_cast<const uint4*>(w.data), static_cast<const float*>(w.scales), w.rows, w.cols,
                   w.scale_block_rows, static_cast<const uint4*>(x.codes), x.scales, m, y);
}

}  // namespace

bool fp8_blocks_supported(int64_t block_rows, int64_t block_cols) {
  return block_cols == kFp8BlockCols && block_rows > 0 && block_rows % kTileRows == 0;
}

bool fp8_layout_supported(const WeightView& w) {
  const auto aligned = [](const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; };
  return w.dtype == DType::kF8E4M3 && w.scales != nullptr &&
         fp8_blocks_supported(w.scale_block_rows, w.scale_block_cols) && w.cols % kFp8BlockCols == 0 && w.rows > 0 &&
         aligned(w.data);
}

size_t fp8_rows_bytes(int64_t num_rows, int64_t k) {
  const size_t code_bytes = static_cast<size_t>(num_rows * k);  // a multiple of 128
  return code_bytes + static_cast<size_t>(num_rows * (k / kFp8BlockCols)) * sizeof(float);
}

Fp8Rows fp8_rows_at(void* workspace, int64_t num_rows, int64_t k) {
  return Fp8Rows{workspace, reinterpret_cast<float*>(static_cast<uint8_t*>(workspace) + num_rows * k)};
}

void quantize_fp8_rows(const float* x, int64_t num_rows, int64_t k, const Fp8Rows& rows, cudaStream_t stream) {
  DI_CHECK(num_rows >= 1 && k % kFp8BlockCols == 0, "quantize_fp8_rows: " << num_rows << " rows of " << k);
  const int64_t items = num_rows * (k / kFp8BlockCols);
  constexpr int kQuantizeThreads = 256;
  launch_dependent(quantize_rows_kernel, dim3(static_cast<unsigned>((items + 7) / 8)), dim3(kQuantizeThreads), 0,
                   stream, x, num_rows, k, static_cast<uint32_t*>(rows.codes), rows.scales);
}

void quantize_fp8_grouped_rows(const float* x, const int32_t* position, int64_t num_tokens, int32_t top_k, int64_t k,
                               const Fp8Rows& rows, int64_t num_rows, cudaStream_t stream) {
  DI_CHECK(k % kFp8BlockCols == 0, "quantize_fp8_grouped_rows: rows of " << k);
  const int64_t items = num_tokens * (k / kFp8BlockCols);
  if (items == 0) return;
  constexpr int kQuantizeThreads = 256;
  quantize_grouped_rows_kernel<<<static_cast<unsigned>((items + 7) / 8), kQuantizeThreads, 0, stream>>>(
      x, position, num_tokens, top_k, k, static_cast<uint32_t*>(rows.codes), rows.scales, num_rows);
  DI_CUDA_CHECK_LAUNCH("quantize_grouped_rows_kernel");
}

void fp8_gemv(const Fp8Rows& x, const WeightView& w, int64_t num_rows, float* y, cudaStream_t stream) {
  DI_CHECK(fp8_layout_supported(w) && num_rows >= 1 && num_rows <= kFp8GemvMaxRows,
           "fp8_gemv: " << num_rows << " rows of a [" << w.rows << ", " << w.cols << "] weight");
  const auto m = static_cast<int32_t>(num_rows);
  if (num_rows <= 8) {
    launch_gemv<1>(w, x, m, y, stream);
  } else if (num_rows <= 16) {
    launch_gemv<2>(w, x, m, y, stream);
  } else if (num_rows <= 32) {
    launch_gemv<4>(w, x, m, y, stream);
  } else {
    launch_gemv<8>(w, x, m, y, stream);
  }
}

void dequantize_fp8_to_bf16(const WeightView& w, void* out, cudaStream_t stream) {
  DI_CHECK(w.dtype == DType::kF8E4M3 && w.cols % 16 == 0 && w.scale_block_rows > 0 && w.scale_block_cols % 16 == 0 &&
               w.scale_block_cols > 0,
           "dequantize_fp8_to_bf16: a [" << w.rows << ", " << w.cols << "] weight of " << dtype_name(w.dtype));
  constexpr int kThreads = 256;
  dequantize_kernel<<<grid_for(w.rows * w.cols / 16, kThreads), kThreads, 0, stream>>>(
      static_cast<const uint4*>(w.data), static_cast<const float*>(w.scales), w.rows, w.cols, w.scale_block_rows,
      w.scale_block_cols, static_cast<__nv_bfloat162*>(out));
  DI_CUDA_CHECK_LAUNCH("dequantize_kernel");
}

}  // namespace deepinfer::kernels::cuda
