#include "kernels/cuda/grouped_gemm_wgmma.h"

#include <cudaTypedefs.h>
#include <cuda_bf16.h>

#include <algorithm>

#include "core/check.h"
#include "kernels/cuda/cuda_check.h"
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

__device__ __forceinline__ void barrier_init(uint32_t bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count) : "memory");
}

__device__ __forceinline__ void barrier_arrive(uint32_t bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(bar) : "memory");
}

// Arrives and announces bytes the TMA will land on the barrier in this phase.
__device__ __forceinline__ void barrier_expect_bytes(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes) : "memory");
}

// Waits for the barrier's phase of this parity to complete (a fresh barrier counts parity 1 as done).
__device__ __forceinline__ void barrier_wait(uint32_t bar, uint32_t parity) {
  asm volatile(
      "{\n.reg .pred done;\nWAIT:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra WAIT;\n}\n" ::"r"(bar),
      "r"(parity)
      : "memory");
}

// Loads the box at (k0, row0) of map into shared memory at dst; its bytes complete on bar.
__device__ __forceinline__ void tma_load(uint32_t dst, const CUtensorMap* map, int32_t k0, int32_t row0, uint32_t bar) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], "
      "[%4];\n" ::"r"(dst),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(k0), "r"(row0), "r"(bar)
      : "memory");
}

// Bias column col of the epilogue's dtype (0 without one).
__device__ __forceinline__ float bias_at(const void* bias, DType dtype, int32_t col) {
  if (bias == nullptr) return 0.0f;
  if (dtype == DType::kBF16) return to_float(static_cast<const __nv_bfloat16*>(bias)[col]);
  if (dtype == DType::kF16) return to_float(static_cast<const __half*>(bias)[col]);
  return static_cast<const float*>(bias)[col];
}

__device__ __forceinline__ float round_bf16(float v) { return __bfloat162float(__float2bfloat16(v)); }

// A tile: its product and where it starts (rows of the product, columns of y).
struct Tile {
  int32_t product, m0, n0;
};

__device__ __forceinline__ Tile find_tile(const WgmmaProduct* products, int32_t num_products, int32_t tile,
                                          int32_t cols) {
  // The product owning it: the last whose first tile is at or before it.
  int32_t lo = 0, hi = num_products - 1;
  while (lo < hi) {
    const int32_t mid = (lo + hi + 1) / 2;
    if (products[mid].tile_begin <= tile) {
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  const int32_t row_tiles = (products[lo].rows + kWgmmaTileRows - 1) / kWgmmaTileRows;
  const int32_t local = tile - products[lo].tile_begin;
  // Rows innermost: the tiles sharing a weight tile run together and read it from L2.
  return {lo, local % row_tiles * kWgmmaTileRows, local / row_tiles * cols};
}

// Stores a consumer warpgroup's rows of the tile: d as wgmma_m64n256k16 leaves it.
__device__ __forceinline__ void store_tile(const float (&d)[128], const WgmmaProduct& p, const Tile& tile, int group,
                                           const WgmmaEpilogue& e) {
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

  if (tid == 0) {
    for (int s = 0; s < kStages; ++s) {
      barrier_init(full + 8 * s, 1);
      barrier_init(empty + 8 * s, kConsumerWarps);
    }
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  __syncthreads();

  // Producer and consumers walk the same tiles and slices, so one count of slices (ring) names
  // each slice's stage and the phase of its barriers for both.
  const int group = tid / 128;
  if (group == kConsumerGroups) {
    if (tid != kConsumerGroups * 128) return;
    uint32_t ring = 0;
    for (int32_t index = blockIdx.x; index < total_tiles; index += gridDim.x) {
      const Tile tile = find_tile(products, num_products, index, cols);
      const int32_t x_row = products[tile.product].row0 + tile.m0;
      const CUtensorMap* maps = weight_maps + 2 * tile.product;
      // The weights' maps were written by a copy before the launch: order them before the TMA's reads.
      for (int w = 0; w < weights; ++w) {
        asm volatile("fence.proxy.tensormap::generic.acquire.gpu [%0], 128;\n" ::"l"(maps + w) : "memory");
      }
      for (int32_t s = 0; s < slices; ++s, ++ring) {
        const uint32_t stage = ring % kStages;
        barrier_wait(empty + 8 * stage, ((ring / kStages) & 1) ^ 1);
        const uint32_t dst = base + stage * kStageBytes;
        barrier_expect_bytes(full + 8 * stage, kStageBytes);
        tma_load(dst, &x_map, s * kSliceK, x_row, full + 8 * stage);
        for (int w = 0; w < weights; ++w) {
          tma_load(dst + kXBytes + w * (kWBytes / weights), maps + w, s * kSliceK, tile.n0, full + 8 * stage);
        }
      }
    }
    return;
  }

  const int lane = tid % 32;
  uint32_t ring = 0;
  float d[128];
  for (int32_t index = blockIdx.x; index < total_tiles; index += gridDim.x) {
    const Tile tile = find_tile(products, num_products, index, cols);
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

bool wgmma_operand_fits(const void* data, int64_t k) {
  return reinterpret_cast<uintptr_t>(data) % 16 == 0 && k % 8 == 0 && k > 0;
}

CUtensorMap wgmma_operand_map(const void* data, int64_t rows, int64_t k, int box_rows) {
  DI_CHECK(wgmma_operand_fits(data, k) && rows > 0, "a TMA operand needs 16-byte aligned rows of k = "
                                                        << k << " (a multiple of 8) bf16 values and rows = " << rows);
  CUtensorMap map;
  const cuuint64_t dims[2] = {static_cast<cuuint64_t>(k), static_cast<cuuint64_t>(rows)};
  const cuuint64_t strides[1] = {static_cast<cuuint64_t>(k) * 2};
  const cuuint32_t box[2] = {kSliceK, static_cast<cuuint32_t>(box_rows)};
  const cuuint32_t element_strides[2] = {1, 1};
  const CUresult status =
      encode_tiled()(&map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, const_cast<void*>(data), dims, strides, box,
                     element_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                     CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  DI_CHECK(status == CUDA_SUCCESS, "cuTensorMapEncodeTiled failed (" << static_cast<int>(status) << ") for a [" << rows
                                                                     << ", " << k << "] bf16 matrix");
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
