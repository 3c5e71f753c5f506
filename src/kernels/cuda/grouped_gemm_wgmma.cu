#include "kernels/cuda/grouped_gemm_wgmma.h"

#include <cudaTypedefs.h>
#include <cuda_bf16.h>

#include <algorithm>

#include "core/check.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/grouped_gemm_tma.cuh"
#include "kernels/cuda/mma_util.cuh"
#include "kernels/cuda/moe_grouped.cuh"
#include "kernels/cuda/shared_carveout.h"
#include "kernels/cuda/wgmma_util.cuh"

namespace deepinfer::kernels::cuda {
namespace {

constexpr int kSliceK = 64;  // one 128-byte swizzled row of bf16
constexpr int kStages = 4;
constexpr int kConsumerGroups = 2;
constexpr int kConsumerWarps = 4 * kConsumerGroups;
constexpr int kThreads = 128 * (kConsumerGroups + 1);  // the last warpgroup loads
constexpr int kXBytes = kWgmmaTileRows * 128;
constexpr int kWBytes = kWgmmaTileCols * 128;
constexpr int kStageBytes = kXBytes + kWBytes;
constexpr int kBarrierOffset = kStages * kStageBytes;
constexpr int kSharedBytes = kBarrierOffset + 2 * kStages * 8 + 1024;  // + the base's alignment
static_assert(kWgmmaTileRows == 64 * kConsumerGroups, "a consumer warpgroup takes 64 rows");

// Output columns of a tile: a weight box's rows (gated: gate's half of the tile, whose outputs are
// the activations).
__host__ __device__ constexpr int tile_columns(bool gated) { return gated ? kWgmmaTileCols / 2 : kWgmmaTileCols; }

__device__ __forceinline__ float round_bf16(float v) { return __bfloat162float(__float2bfloat16(v)); }

// Stores a consumer warpgroup's rows of the tile: d as wgmma_m64n256k16 leaves it.
__device__ __forceinline__ void store_tile(const float (&d)[128], const WgmmaProduct& p, const ProductTile& tile,
                                           int group, const WgmmaEpilogue& e) {
  const int lane = static_cast<int>(threadIdx.x % 32);
  const int t = lane % 4;
  const int32_t row = tile.m0 + group * 64 + static_cast<int>(threadIdx.x / 32 % 4) * 16 + lane / 4;
  auto* y = static_cast<__nv_bfloat16*>(p.y);
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int32_t r = row + 8 * half;
    if (r >= p.rows) continue;
    __nv_bfloat16* y_row = y + r * p.ld_y;
    if (e.gated) {
      // Column c of gate sits in accumulator column c, of up in 128 + c.
#pragma unroll
      for (int j = 0; j < 16; ++j) {
        const int32_t col = tile.n0 + 8 * j + 2 * t;
        if (col >= p.n) continue;
        float out[2];
#pragma unroll
        for (int c = 0; c < 2; ++c) {
          const float g = round_bf16(d[4 * j + 2 * half + c] + bias_at(p.bias[0], e.bias_dtype, col + c));
          const float u = round_bf16(d[4 * (j + 16) + 2 * half + c] + bias_at(p.bias[1], e.bias_dtype, col + c));
          out[c] = expert_activation(g, u, e.activation, e.swiglu_alpha, e.swiglu_limit);
        }
        *reinterpret_cast<uint32_t*>(y_row + col) = pack_bf16(out[0], out[1]);
      }
    } else {
#pragma unroll
      for (int j = 0; j < 32; ++j) {
        const int32_t col = tile.n0 + 8 * j + 2 * t;
        if (col >= p.n) continue;
        *reinterpret_cast<uint32_t*>(y_row + col) =
            pack_bf16(d[4 * j + 2 * half] + bias_at(p.bias[0], e.bias_dtype, col),
                      d[4 * j + 2 * half + 1] + bias_at(p.bias[0], e.bias_dtype, col + 1));
      }
    }
  }
}

__global__ void __launch_bounds__(kThreads, 1)
    grouped_gemm_wgmma_kernel(const __grid_constant__ CUtensorMap x_map, const CUtensorMap* weight_maps,
                              const WgmmaProduct* products, int32_t num_products, int32_t total_tiles, int32_t k,
                              WgmmaEpilogue epilogue) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  extern __shared__ __align__(1024) char shared_raw[];
  const uint32_t raw = shared_address(shared_raw);
  const uint32_t base = (raw + 1023) & ~1023u;
  const uint32_t full = base + kBarrierOffset;  // stage s's bytes have landed
  const uint32_t empty = full + kStages * 8;    // every consumer warp is done with stage s
  const int tid = static_cast<int>(threadIdx.x);
  const int weights = epilogue.gated ? 2 : 1;  // gate and up, half the tile's weight rows each
  const int32_t cols = tile_columns(epilogue.gated);
  const int32_t slices = (k + kSliceK - 1) / kSliceK;

  init_ring_barriers(full, empty, kStages, kConsumerWarps);
  __syncthreads();

  const int group = tid / 128;
  if (group == kConsumerGroups) {
    if (tid == kConsumerGroups * 128) {
      load_product_tiles<kStages>(x_map, weight_maps, products, num_products, total_tiles, cols, slices, kSliceK,
                                  weights, base, full, empty, kStageBytes, kXBytes, kWBytes);
    }
    return;
  }

  const int lane = tid % 32;
  uint32_t ring = 0;
  float d[128];
  for (int32_t index = blockIdx.x; index < total_tiles; index += gridDim.x) {
    const ProductTile tile = find_product_tile(products, num_products, index, cols);
    const WgmmaProduct& p = products[tile.product];
    // A warpgroup whose 64 rows are all past the product's end (a ragged last tile) only frees stages.
    const bool active = tile.m0 + group * 64 < p.rows;
    for (int32_t s = 0; s < slices; ++s, ++ring) {
      const uint32_t stage = ring % kStages;
      barrier_wait(full + 8 * stage, (ring / kStages) & 1);
      if (active) {
        const uint64_t x_desc = wgmma_descriptor(base + stage * kStageBytes + group * 64 * 128, 16);
        const uint64_t w_desc = wgmma_descriptor(base + stage * kStageBytes + kXBytes, 16);
        wgmma_pin(d);
        wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < kSliceK / 16; ++kk) {
          // The tile's first product overwrites the accumulators: no instruction but wgmma writes them.
          wgmma_m64n256k16<0>(d, x_desc + 2 * kk, w_desc + 2 * kk, s > 0 || kk > 0);
        }
        wgmma_commit();
        // The products of the slice before are done: its stage may be refilled.
        wgmma_wait<1>();
        wgmma_pin(d);
      }
      if (s > 0 && lane == 0) barrier_arrive(empty + 8 * ((ring - 1) % kStages));
    }
    wgmma_wait<0>();
    wgmma_pin(d);
    if (lane == 0) barrier_arrive(empty + 8 * ((ring - 1) % kStages));
    if (active) store_tile(d, p, tile, group, epilogue);
  }
#else
  __trap();
#endif
}

PFN_cuTensorMapEncodeTiled_v12000 encode_tiled() {
  static const PFN_cuTensorMapEncodeTiled_v12000 encode = [] {
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult found{};
    DI_CUDA_CHECK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &found));
    DI_CHECK(found == cudaDriverEntryPointSuccess && fn != nullptr,
             "the CUDA driver has no cuTensorMapEncodeTiled (needs a CUDA 12 driver)");
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(fn);
  }();
  return encode;
}

}  // namespace

bool grouped_gemm_wgmma_supported() {
  static const bool supported = [] {
    int device = 0;
    int major = 0;
    int minor = 0;
    DI_CUDA_CHECK(cudaGetDevice(&device));
    DI_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
    DI_CUDA_CHECK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device));
    return major == 9 && minor == 0;
  }();
  return supported;
}

bool wgmma_operand_fits(const void* data, int64_t k, DType dtype) {
  return reinterpret_cast<uintptr_t>(data) % 16 == 0 && k > 0 && (k * dtype_size_bytes(dtype)) % 16 == 0;
}

CUtensorMap wgmma_operand_map(const void* data, int64_t rows, int64_t k, int box_rows, DType dtype) {
  DI_CHECK((dtype == DType::kBF16 || dtype == DType::kF8E4M3) && wgmma_operand_fits(data, k, dtype) && rows > 0,
           "a TMA operand needs 16-byte aligned rows of k = " << k << " " << dtype_name(dtype)
                                                              << " values (bf16 or f8e4m3) and rows = " << rows);
  CUtensorMap map;
  const size_t element = dtype_size_bytes(dtype);
  const cuuint64_t dims[2] = {static_cast<cuuint64_t>(k), static_cast<cuuint64_t>(rows)};
  const cuuint64_t strides[1] = {static_cast<cuuint64_t>(k) * element};
  // A box row is one 128-byte swizzled row.
  const cuuint32_t box[2] = {static_cast<cuuint32_t>(128 / element), static_cast<cuuint32_t>(box_rows)};
  const cuuint32_t element_strides[2] = {1, 1};
  const CUresult status =
      encode_tiled()(&map, dtype == DType::kBF16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_UINT8, 2,
                     const_cast<void*>(data), dims, strides, box, element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE,
                     CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  DI_CHECK(status == CUDA_SUCCESS, "cuTensorMapEncodeTiled failed (" << static_cast<int>(status) << ") for a [" << rows
                                                                     << ", " << k << "] " << dtype_name(dtype)
                                                                     << " matrix");
  return map;
}

int wgmma_weight_box_rows(bool gated) { return tile_columns(gated); }

int32_t wgmma_product_tiles(int32_t rows, int32_t n, bool gated) {
  const int32_t cols = tile_columns(gated);
  return ((rows + kWgmmaTileRows - 1) / kWgmmaTileRows) * ((n + cols - 1) / cols);
}

void launch_grouped_gemm_wgmma(const CUtensorMap& x_map, const CUtensorMap* weight_maps, const WgmmaProduct* products,
                               int32_t num_products, int32_t total_tiles, int64_t k, const WgmmaEpilogue& epilogue,
                               cudaStream_t stream) {
  if (total_tiles == 0) return;
  static const bool configured = [] {
    DI_CUDA_CHECK(cudaFuncSetAttribute(grouped_gemm_wgmma_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       kSharedBytes));
    return true;
  }();
  (void)configured;
  const int32_t blocks = std::min(total_tiles, multiprocessor_count());  // persistent: one a multiprocessor
  grouped_gemm_wgmma_kernel<<<static_cast<unsigned>(blocks), kThreads, kSharedBytes, stream>>>(
      x_map, weight_maps, products, num_products, total_tiles, static_cast<int32_t>(k), epilogue);
  DI_CUDA_CHECK_LAUNCH("grouped_gemm_wgmma_kernel");
}

}  // namespace deepinfer::kernels::cuda
