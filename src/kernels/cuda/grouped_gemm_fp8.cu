#include <algorithm>

#include "core/check.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/grouped_gemm_fp8.h"
#include "kernels/cuda/grouped_gemm_tma.cuh"
#include "kernels/cuda/mma_util.cuh"
#include "kernels/cuda/moe_grouped.cuh"
#include "kernels/cuda/shared_carveout.h"
#include "kernels/cuda/wgmma_util.cuh"

namespace deepinfer::kernels::cuda {
namespace {

constexpr int kSliceK = 128;  // one 128-byte swizzled row of codes, one scale block
constexpr int kStages = 6;
constexpr int kConsumerGroups = 2;
constexpr int kConsumerWarps = 4 * kConsumerGroups;
constexpr int kThreads = 128 * (kConsumerGroups + 1);  // the last warpgroup loads
constexpr int kTileWeightRows = 128;                   // one scale block of rows
constexpr int kXBytes = kWgmmaTileRows * kSliceK;
constexpr int kWBytes = kTileWeightRows * kSliceK;
constexpr int kStageBytes = kXBytes + kWBytes;
constexpr int kBarrierOffset = kStages * kStageBytes;
constexpr int kSharedBytes = kBarrierOffset + 2 * kStages * 8 + 1024;  // + the base's alignment
static_assert(kWgmmaTileRows == 64 * kConsumerGroups, "a consumer warpgroup takes 64 rows");

// Output columns of a tile: a weight box's rows (gated: gate's half of the tile).
__host__ __device__ constexpr int tile_columns(bool gated) { return gated ? kTileWeightRows / 2 : kTileWeightRows; }

// Stores a consumer warpgroup's rows of the tile, sums as wgmma_m64k32_e4m3<128> leaves them (gated:
// gate's column c in sums' column c, up's in 64 + c), as float32.
__device__ __forceinline__ void store_tile(const float (&sums)[64], const WgmmaProduct& p, const ProductTile& tile,
                                           int group, const WgmmaEpilogue& e) {
  const int lane = static_cast<int>(threadIdx.x % 32);
  const int t = lane % 4;
  const int32_t row = tile.m0 + group * 64 + static_cast<int>(threadIdx.x / 32 % 4) * 16 + lane / 4;
  auto* y = static_cast<float*>(p.y);
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int32_t r = row + 8 * half;
    if (r >= p.rows) continue;
    float* y_row = y + r * p.ld_y;
    if (e.gated) {
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        const int32_t col = tile.n0 + 8 * j + 2 * t;
        if (col >= p.n) continue;
        float out[2];
#pragma unroll
        for (int c = 0; c < 2; ++c) {
          const float g = sums[4 * j + 2 * half + c] + bias_at(p.bias[0], e.bias_dtype, col + c);
          const float u = sums[4 * (j + 8) + 2 * half + c] + bias_at(p.bias[1], e.bias_dtype, col + c);
          out[c] = expert_activation(g, u, e.activation, e.swiglu_alpha, e.swiglu_limit);
        }
        *reinterpret_cast<float2*>(y_row + col) = make_float2(out[0], out[1]);
      }
    } else {
#pragma unroll
      for (int j = 0; j < 16; ++j) {
        const int32_t col = tile.n0 + 8 * j + 2 * t;
        if (col >= p.n) continue;
        *reinterpret_cast<float2*>(y_row + col) =
            make_float2(sums[4 * j + 2 * half] + bias_at(p.bias[0], e.bias_dtype, col),
                        sums[4 * j + 2 * half + 1] + bias_at(p.bias[0], e.bias_dtype, col + 1));
      }
    }
  }
}

__global__ void __launch_bounds__(kThreads, 1)
    grouped_gemm_fp8_kernel(const __grid_constant__ CUtensorMap x_map, const float* __restrict__ x_scales,
                            int32_t x_rows, const CUtensorMap* weight_maps, const WgmmaProduct* products,
                            int32_t num_products, int32_t total_tiles, int32_t k, WgmmaEpilogue epilogue) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  extern __shared__ __align__(1024) char shared_raw[];
  const uint32_t base = (shared_address(shared_raw) + 1023) & ~1023u;
  const uint32_t full = base + kBarrierOffset;  // stage s's bytes have landed
  const uint32_t empty = full + kStages * 8;    // every consumer warp is done with stage s
  const int tid = static_cast<int>(threadIdx.x);
  const bool gated = epilogue.gated;
  const int32_t cols = tile_columns(gated);
  const int32_t slices = k / kSliceK;

  init_ring_barriers(full, empty, kStages, kConsumerWarps);
  __syncthreads();

  const int group = tid / 128;
  if (group == kConsumerGroups) {
    if (tid == kConsumerGroups * 128) {
      load_product_tiles<kStages>(x_map, weight_maps, products, num_products, total_tiles, cols, slices, kSliceK,
                                  gated ? 2 : 1, base, full, empty, kStageBytes, kXBytes, kWBytes);
    }
    return;
  }

  const int lane = tid % 32;
  const int32_t lane_row = group * 64 + (tid / 32 % 4) * 16 + lane / 4;  // and lane_row + 8
  uint32_t ring = 0;
  float sums[64];
  float part[64];
  for (int32_t index = blockIdx.x; index < total_tiles; index += gridDim.x) {
    const ProductTile tile = find_product_tile(products, num_products, index, cols);
    const WgmmaProduct& p = products[tile.product];
    // A warpgroup whose 64 rows are all past the product's end (a ragged last tile) only frees stages.
    const bool active = tile.m0 + group * 64 < p.rows;
    // The lane's two rows' scales; a row past the product's end reads its first row's (never stored).
    const int32_t r0 = tile.m0 + lane_row;
    const float* x_scale0 = x_scales + p.row0 + (r0 < p.rows ? r0 : 0);
    const float* x_scale1 = x_scales + p.row0 + (r0 + 8 < p.rows ? r0 + 8 : 0);
    // The tile's rows of each weight lie in one block of 128 rows: one scale per weight and slice.
    const int32_t block = tile.n0 / kTileWeightRows;
    const float* w_scale0 = p.scales[0] + block * slices;
    const float* w_scale1 = p.scales[gated ? 1 : 0] + block * slices;
#pragma unroll
    for (int i = 0; i < 64; ++i) sums[i] = 0.0f;
    for (int32_t s = 0; s < slices; ++s, ++ring) {
      const uint32_t stage = ring % kStages;
      // The slice's scales, loaded while its products run.
      float x0 = 0.0f, x1 = 0.0f, w0 = 0.0f, w1 = 0.0f;
      if (active) {
        x0 = x_scale0[s * x_rows];
        x1 = x_scale1[s * x_rows];
        w0 = w_scale0[s];
        w1 = w_scale1[s];
      }
      barrier_wait(full + 8 * stage, (ring / kStages) & 1);
      if (active) {
        const uint64_t x_desc = wgmma_descriptor(base + stage * kStageBytes + group * 64 * kSliceK, 16);
        const uint64_t w_desc = wgmma_descriptor(base + stage * kStageBytes + kXBytes, 16);
        wgmma_pin(part);
        wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < kSliceK / 32; ++kk) {
          // The slice's first product overwrites part: no instruction but wgmma writes it.
          wgmma_m64k32_e4m3<128>(part, x_desc + 2 * kk, w_desc + 2 * kk, kk > 0);
        }
        wgmma_commit();
        wgmma_wait<0>();
        wgmma_pin(part);
      }
      if (lane == 0) barrier_arrive(empty + 8 * stage);
      if (active) {
        // Promotion: the slice's sums times both scales (gated: up's columns take up's scale).
        const float gate0 = x0 * w0, gate1 = x1 * w0, up0 = x0 * w1, up1 = x1 * w1;
#pragma unroll
        for (int j = 0; j < 16; ++j) {
          const float scale0 = j < 8 ? gate0 : up0;
          const float scale1 = j < 8 ? gate1 : up1;
          sums[4 * j] += part[4 * j] * scale0;
          sums[4 * j + 1] += part[4 * j + 1] * scale0;
          sums[4 * j + 2] += part[4 * j + 2] * scale1;
          sums[4 * j + 3] += part[4 * j + 3] * scale1;
        }
      }
    }
    if (active) store_tile(sums, p, tile, group, epilogue);
  }
#else
  __trap();
#endif
}

}  // namespace

int fp8_weight_box_rows(bool gated) { return tile_columns(gated); }

int32_t fp8_product_tiles(int32_t rows, int32_t n, bool gated) {
  const int32_t cols = tile_columns(gated);
  return ((rows + kWgmmaTileRows - 1) / kWgmmaTileRows) * ((n + cols - 1) / cols);
}

void launch_grouped_gemm_fp8(const CUtensorMap& x_map, const float* x_scales, int64_t x_rows,
                             const CUtensorMap* weight_maps, const WgmmaProduct* products, int32_t num_products,
                             int32_t total_tiles, int64_t k, const WgmmaEpilogue& epilogue, cudaStream_t stream) {
  if (total_tiles == 0) return;
  DI_CHECK(k % kSliceK == 0, "the grouped FP8 GEMM takes k a multiple of " << kSliceK << ", not " << k);
  static const bool configured = [] {
    DI_CUDA_CHECK(
        cudaFuncSetAttribute(grouped_gemm_fp8_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSharedBytes));
    return true;
  }();
  (void)configured;
  const int32_t blocks = std::min(total_tiles, multiprocessor_count());  // persistent: one a multiprocessor
  grouped_gemm_fp8_kernel<<<static_cast<unsigned>(blocks), kThreads, kSharedBytes, stream>>>(
      x_map, x_scales, static_cast<int32_t>(x_rows), weight_maps, products, num_products, total_tiles,
      static_cast<int32_t>(k), epilogue);
  DI_CUDA_CHECK_LAUNCH("grouped_gemm_fp8_kernel");
}

}  // namespace deepinfer::kernels::cuda
