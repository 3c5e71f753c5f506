#include "kernels/cuda/grouped_gemm_wgmma.h"

#include <cudaTypedefs.h>
#include <cuda_bf16.h>

#include "core/check.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/mma_util.cuh"
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

__global__ void __launch_bounds__(kThreads, 1)
    grouped_gemm_wgmma_kernel(const __grid_constant__ CUtensorMap x_map, const CUtensorMap* weight_maps,
                              const WgmmaProduct* products, int32_t num_products, int32_t k) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  extern __shared__ __align__(1024) char shared_raw[];
  const uint32_t raw = shared_address(shared_raw);
  const uint32_t base = (raw + 1023) & ~1023u;
  const uint32_t full = base + kBarrierOffset;  // stage s's bytes have landed
  const uint32_t empty = full + kStages * 8;    // every consumer warp is done with stage s
  const int tid = static_cast<int>(threadIdx.x);

  // The product owning this block's tile: the last whose first tile is at or before it.
  const auto tile = static_cast<int32_t>(blockIdx.x);
  int32_t lo = 0, hi = num_products - 1;
  while (lo < hi) {
    const int32_t mid = (lo + hi + 1) / 2;
    if (products[mid].tile_begin <= tile) {
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  const WgmmaProduct p = products[lo];
  const int32_t row_tiles = (p.rows + kWgmmaTileRows - 1) / kWgmmaTileRows;
  const int32_t m0 = (tile - p.tile_begin) % row_tiles * kWgmmaTileRows;  // rows innermost: one weight
  const int32_t n0 = (tile - p.tile_begin) / row_tiles * kWgmmaTileCols;  // tile serves them from L2
  const int32_t slices = (k + kSliceK - 1) / kSliceK;

  if (tid == 0) {
    for (int s = 0; s < kStages; ++s) {
      barrier_init(full + 8 * s, 1);
      barrier_init(empty + 8 * s, kConsumerWarps);
    }
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  }
  __syncthreads();

  const int group = tid / 128;
  if (group == kConsumerGroups) {
    if (tid == kConsumerGroups * 128) {
      const CUtensorMap* w_map = weight_maps + lo;
      // The weight's map was written by a copy before the launch: order it before the TMA's reads.
      asm volatile("fence.proxy.tensormap::generic.acquire.gpu [%0], 128;\n" ::"l"(w_map) : "memory");
      for (int32_t s = 0; s < slices; ++s) {
        const int stage = s % kStages;
        barrier_wait(empty + 8 * stage, ((s / kStages) & 1) ^ 1);
        const uint32_t dst = base + stage * kStageBytes;
        barrier_expect_bytes(full + 8 * stage, kStageBytes);
        tma_load(dst, &x_map, s * kSliceK, p.row0 + m0, full + 8 * stage);
        tma_load(dst + kXBytes, w_map, s * kSliceK, n0, full + 8 * stage);
      }
    }
    return;
  }

  float d[128];
#pragma unroll
  for (int i = 0; i < 128; ++i) d[i] = 0.0f;
  const int lane = tid % 32;
  for (int32_t s = 0; s < slices; ++s) {
    const int stage = s % kStages;
    barrier_wait(full + 8 * stage, (s / kStages) & 1);
    const uint32_t x_tile = base + stage * kStageBytes + group * 64 * 128;
    const uint64_t x_desc = wgmma_descriptor(x_tile, 16);
    const uint64_t w_desc = wgmma_descriptor(base + stage * kStageBytes + kXBytes, 16);
    wgmma_pin(d);
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < kSliceK / 16; ++kk) wgmma_m64n256k16<0>(d, x_desc + 2 * kk, w_desc + 2 * kk, 1);
    wgmma_commit();
    // The products of the slice before are done: its stage may be refilled.
    wgmma_wait<1>();
    wgmma_pin(d);
    if (s > 0 && lane == 0) barrier_arrive(empty + 8 * ((s - 1) % kStages));
  }
  wgmma_wait<0>();
  wgmma_pin(d);

  const int g = lane / 4;
  const int t = lane % 4;
  const int32_t row = m0 + group * 64 + (tid / 32 % 4) * 16 + g;
  auto* y = static_cast<__nv_bfloat16*>(p.y);
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int32_t r = row + 8 * half;
    if (r >= p.rows) continue;
    __nv_bfloat16* y_row = y + r * p.ld_y;
#pragma unroll
    for (int j = 0; j < 32; ++j) {
      const int32_t col = n0 + 8 * j + 2 * t;
      if (col < p.n) {
        *reinterpret_cast<uint32_t*>(y_row + col) = pack_bf16(d[4 * j + 2 * half], d[4 * j + 2 * half + 1]);
      }
    }
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

int32_t wgmma_product_tiles(int32_t rows, int32_t n) {
  return ((rows + kWgmmaTileRows - 1) / kWgmmaTileRows) * ((n + kWgmmaTileCols - 1) / kWgmmaTileCols);
}

void launch_grouped_gemm_wgmma(const CUtensorMap& x_map, const CUtensorMap* weight_maps, const WgmmaProduct* products,
                               int32_t num_products, int32_t total_tiles, int64_t k, cudaStream_t stream) {
  if (total_tiles == 0) return;
  static const bool configured = [] {
    DI_CUDA_CHECK(
        cudaFuncSetAttribute(grouped_gemm_wgmma_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSharedBytes));
    return true;
  }();
  (void)configured;
  grouped_gemm_wgmma_kernel<<<static_cast<unsigned>(total_tiles), kThreads, kSharedBytes, stream>>>(
      x_map, weight_maps, products, num_products, static_cast<int32_t>(k));
  DI_CUDA_CHECK_LAUNCH("grouped_gemm_wgmma_kernel");
}

}  // namespace deepinfer::kernels::cuda
