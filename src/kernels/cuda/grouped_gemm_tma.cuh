// Device pieces the grouped wgmma GEMMs share (grouped_gemm_wgmma.cu for bf16, grouped_gemm_fp8.cu
// for FP8): mbarriers, TMA box loads, finding a persistent block's next tile, the producer thread
// that fills the ring of shared-memory stages both kernels consume, and the epilogue's biases.
#pragma once

#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/grouped_gemm_wgmma.h"

namespace deepinfer::kernels::cuda {

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

// A tile: its product and where it starts (rows of the product, columns of y).
struct ProductTile {
  int32_t product, m0, n0;
};

// Tile number tile of the launch, of tiles kWgmmaTileRows rows by cols output columns.
__device__ __forceinline__ ProductTile find_product_tile(const WgmmaProduct* products, int32_t num_products,
                                                         int32_t tile, int32_t cols) {
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

// The producer thread: for each of the block's tiles, each slice of slice_k elements of K as one
// box of x's kWgmmaTileRows rows and one box per weight (gated: gate's, then up's, each w_bytes /
// weights) into stage ring % kStages of the ring at base (stage_bytes apart, x's box first), after
// the consumers have freed it (empty) and completing its bytes on full. Consumers walk the same tiles
// and slices, so one count of slices (ring) names each slice's stage and the phase of its barriers.
template <int kStages>
__device__ __forceinline__ void load_product_tiles(const CUtensorMap& x_map, const CUtensorMap* weight_maps,
                                                   const WgmmaProduct* products, int32_t num_products,
                                                   int32_t total_tiles, int32_t cols, int32_t slices, int32_t slice_k,
                                                   int weights, uint32_t base, uint32_t full, uint32_t empty,
                                                   uint32_t stage_bytes, uint32_t x_bytes, uint32_t w_bytes) {
  uint32_t ring = 0;
  for (int32_t index = blockIdx.x; index < total_tiles; index += gridDim.x) {
    const ProductTile tile = find_product_tile(products, num_products, index, cols);
    const int32_t x_row = products[tile.product].row0 + tile.m0;
    const CUtensorMap* maps = weight_maps + 2 * tile.product;
    // The weights' maps were written by a copy before the launch: order them before the TMA's reads.
    for (int w = 0; w < weights; ++w) {
      asm volatile("fence.proxy.tensormap::generic.acquire.gpu [%0], 128;\n" ::"l"(maps + w) : "memory");
    }
    for (int32_t s = 0; s < slices; ++s, ++ring) {
      const uint32_t stage = ring % kStages;
      barrier_wait(empty + 8 * stage, ((ring / kStages) & 1) ^ 1);
      const uint32_t dst = base + stage * stage_bytes;
      barrier_expect_bytes(full + 8 * stage, stage_bytes);
      tma_load(dst, &x_map, s * slice_k, x_row, full + 8 * stage);
      for (int w = 0; w < weights; ++w) {
        tma_load(dst + x_bytes + w * (w_bytes / weights), maps + w, s * slice_k, tile.n0, full + 8 * stage);
      }
    }
  }
}

// Sets up the ring's barriers (thread 0; the block synchronises after): full[s] completes when a
// stage's bytes land, empty[s] when consumer_warps warps have freed it.
__device__ __forceinline__ void init_ring_barriers(uint32_t full, uint32_t empty, int stages, uint32_t consumer_warps) {
  if (threadIdx.x != 0) return;
  for (int s = 0; s < stages; ++s) {
    barrier_init(full + 8 * s, 1);
    barrier_init(empty + 8 * s, consumer_warps);
  }
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}

}  // namespace deepinfer::kernels::cuda
