#include <algorithm>

#include "core/check.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/dependent_launch.cuh"
#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/gemm_fp8_swapped.h"
#include "kernels/cuda/grouped_gemm_tma.cuh"
#include "kernels/cuda/grouped_gemm_wgmma.h"
#include "kernels/cuda/mma_util.cuh"
#include "kernels/cuda/shared_carveout.h"
#include "kernels/cuda/wgmma_util.cuh"

namespace deepinfer::kernels::cuda {
namespace {

constexpr int kSliceK = 128;    // one 128-byte swizzled row of codes, one scale block
constexpr int kTileRows = 128;  // weight rows of a block: one scale block of rows
constexpr int kConsumerThreads = 256;
constexpr int kConsumerWarps = kConsumerThreads / 32;
constexpr int kThreads = kConsumerThreads + 32;  // the last warp loads
constexpr int kMaxSplits = 16;
constexpr int kMaxSplitSlices = 64;  // k slices of one split whose x scales shared memory holds
// Splits times padded rows at most: the last block of a tile reads every split's partial sums,
// 128 x 256 floats at most.
constexpr int kMaxSplitRows = 256;
constexpr int kMaxSharedBytes = 227 * 1024;

template <int kTokens>
struct Layout {
  static constexpr int kWBytes = kTileRows * kSliceK;
  static constexpr int kXBytes = kTokens * kSliceK;
  static constexpr int kStageBytes = kWBytes + kXBytes;
  // A split's scales: x's [slice][token], then the weight's per slice.
  static constexpr int kScaleBytes = kMaxSplitSlices * (kTokens + 1) * 4;
  static constexpr int kFitting = (kMaxSharedBytes - 1024 - kScaleBytes - 16 * 9) / kStageBytes;
  static constexpr int kStages = kFitting < 8 ? kFitting : 8;
  static constexpr int kScaleOffset = kStages * kStageBytes;
  static constexpr int kBarrierOffset = kScaleOffset + kScaleBytes;
  static constexpr int kLastOffset = kBarrierOffset + 16 * kStages;  // whether this block adds the splits
  static constexpr int kSharedBytes = kLastOffset + 16 + 1024;       // + the base's alignment
  static_assert(kSharedBytes <= kMaxSharedBytes, "shared memory");
};

// The producer thread: slice i of the split's count (from slice s0) into stage i % kStages, the
// weight's 128 rows first. The first stages' weight boxes go out before the wait for the kernel
// that quantises x, so they stream while it finishes.
template <int kTokens>
__device__ __forceinline__ void load_slices(const CUtensorMap& w_map, const CUtensorMap& x_map, int32_t n0, int32_t s0,
                                            int32_t count, uint32_t base, uint32_t full, uint32_t empty) {
  using L = Layout<kTokens>;
  const int32_t early = count < L::kStages ? count : L::kStages;
  for (int32_t i = 0; i < early; ++i) {
    barrier_expect_bytes(full + 8 * i, L::kStageBytes);
    tma_load(base + i * L::kStageBytes, &w_map, (s0 + i) * kSliceK, n0, full + 8 * i);
  }
  wait_for_previous_grid();
  for (int32_t i = 0; i < count; ++i) {
    const uint32_t stage = i % L::kStages;
    const uint32_t dst = base + stage * L::kStageBytes;
    if (i >= early) {
      barrier_wait(empty + 8 * stage, ((i / L::kStages) & 1) ^ 1);
      barrier_expect_bytes(full + 8 * stage, L::kStageBytes);
      tma_load(dst, &w_map, (s0 + i) * kSliceK, n0, full + 8 * stage);
    }
    tma_load(dst + L::kWBytes, &x_map, (s0 + i) * kSliceK, 0, full + 8 * stage);
  }
}

// Sums value i of a consumer thread (wgmma's layout: i = 4j + 2h + c) into y: weight row n0 + row
// (row + 8 for h = 1), x row 8j + 2(lane % 4) + c.
__device__ __forceinline__ void store_value(float* y, int32_t m, int32_t n, int32_t n0, int32_t row, int i,
                                            float value) {
  const int32_t token = 8 * (i / 4) + 2 * static_cast<int32_t>(threadIdx.x % 4) + i % 2;
  const int32_t col = n0 + row + 8 * (i / 2 % 2);
  if (token < m && col < n) y[static_cast<int64_t>(token) * n + col] = value;
}

// Blocks are (tile, split) pairs, splits innermost. With more than one split, each block stores its
// partial sums (value i of consumer thread t at i * kConsumerThreads + t of its slot in partials),
// and the last of a tile's blocks to finish, told by the tile's counter (which it resets to zero),
// adds every split's in split order and stores the tile: the same result on every run.
template <int kTokens>
__global__ void __launch_bounds__(kThreads, 1)
    fp8_swapped_gemm_kernel(const __grid_constant__ CUtensorMap w_map, const __grid_constant__ CUtensorMap x_map,
                            const float* __restrict__ w_scales, const float* __restrict__ x_scales, int32_t m,
                            int32_t n, int32_t slices, int32_t splits, float* __restrict__ partials,
                            uint32_t* __restrict__ counters, float* __restrict__ y) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using L = Layout<kTokens>;
  constexpr int kValues = kTokens / 2;
  extern __shared__ __align__(1024) char shared_raw[];
  const uint32_t base = (shared_address(shared_raw) + 1023) & ~1023u;
  char* const shared = shared_raw + (base - shared_address(shared_raw));
  float* const x_scale = reinterpret_cast<float*>(shared + L::kScaleOffset);
  float* const w_scale = x_scale + kMaxSplitSlices * kTokens;
  const uint32_t full = base + L::kBarrierOffset;  // stage s's bytes have landed
  const uint32_t empty = full + L::kStages * 8;    // every consumer warp is done with stage s
  const int32_t tile = static_cast<int32_t>(blockIdx.x) / splits;
  const int32_t split = static_cast<int32_t>(blockIdx.x) % splits;
  const int32_t n0 = tile * kTileRows;
  const int32_t s0 = slices * split / splits;
  const int32_t count = slices * (split + 1) / splits - s0;
  const int tid = static_cast<int>(threadIdx.x);

  init_ring_barriers(full, empty, L::kStages, kConsumerWarps);
  __syncthreads();

  if (tid >= kConsumerThreads) {
    if (tid == kConsumerThreads) load_slices<kTokens>(w_map, x_map, n0, s0, count, base, full, empty);
    return;
  }
  wait_for_previous_grid();
  for (int i = tid; i < count * kTokens; i += kConsumerThreads) {
    const int32_t token = i % kTokens;
    x_scale[i] = token < m ? x_scales[static_cast<int64_t>(s0 + i / kTokens) * m + token] : 0.0f;
  }
  for (int i = tid; i < count; i += kConsumerThreads) w_scale[i] = w_scales[tile * slices + s0 + i];
  named_barrier_sync<kConsumerThreads>(1);

  const int group = tid / 128;
  const int t = tid % 4;
  float sums[kValues];
#pragma unroll
  for (int i = 0; i < kValues; ++i) sums[i] = 0.0f;
  float part[kValues];
  for (int32_t i = 0; i < count; ++i) {
    const uint32_t stage = i % L::kStages;
    barrier_wait(full + 8 * stage, (i / L::kStages) & 1);
    const uint64_t w_desc = wgmma_descriptor(base + stage * L::kStageBytes + group * 64 * kSliceK, 16);
    const uint64_t x_desc = wgmma_descriptor(base + stage * L::kStageBytes + L::kWBytes, 16);
    wgmma_pin(part);
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < kSliceK / 32; ++kk) {
      // The slice's first product overwrites part: no instruction but wgmma writes it.
      wgmma_m64k32_e4m3<kTokens>(part, w_desc + 2 * kk, x_desc + 2 * kk, kk > 0);
    }
    wgmma_commit();
    wgmma_wait<0>();
    wgmma_pin(part);
    if (tid % 32 == 0) barrier_arrive(empty + 8 * stage);
    // Promotion: the weight's scale is the block's; x's is the column's (token's).
    const float w = w_scale[i];
    const float* xs = x_scale + i * kTokens;
#pragma unroll
    for (int j = 0; j < kTokens / 8; ++j) {
      const float2 x = *reinterpret_cast<const float2*>(xs + 8 * j + 2 * t);
      const float scale0 = w * x.x, scale1 = w * x.y;
      sums[4 * j] += part[4 * j] * scale0;
      sums[4 * j + 1] += part[4 * j + 1] * scale1;
      sums[4 * j + 2] += part[4 * j + 2] * scale0;
      sums[4 * j + 3] += part[4 * j + 3] * scale1;
    }
  }
  if (splits > 1) {
    float* mine = partials + static_cast<int64_t>(blockIdx.x) * kValues * kConsumerThreads;
#pragma unroll
    for (int i = 0; i < kValues; ++i) mine[i * kConsumerThreads + tid] = sums[i];
    __threadfence();  // the sums reach the device before the counter says so
    named_barrier_sync<kConsumerThreads>(1);
    auto* last = reinterpret_cast<volatile int*>(shared + L::kLastOffset);
    if (tid == 0) {
      const bool is_last = atomicAdd(counters + tile, 1u) == static_cast<uint32_t>(splits - 1);
      if (is_last) counters[tile] = 0;
      *last = is_last ? 1 : 0;
    }
    named_barrier_sync<kConsumerThreads>(1);
    if (*last == 0) return;
    __threadfence();
    const float* tile_partials = partials + static_cast<int64_t>(tile) * splits * kValues * kConsumerThreads;
    // Split by split, each split's values loaded together: one round trip to L2 a split.
    float totals[kValues];
#pragma unroll
    for (int i = 0; i < kValues; ++i) totals[i] = 0.0f;
    for (int32_t r = 0; r < splits; ++r) {
      const float* split_partials = tile_partials + static_cast<int64_t>(r) * kValues * kConsumerThreads + tid;
#pragma unroll
      for (int i = 0; i < kValues; ++i) {
        totals[i] += r == split ? sums[i] : __ldcg(split_partials + i * kConsumerThreads);
      }
    }
#pragma unroll
    for (int i = 0; i < kValues; ++i) sums[i] = totals[i];
  }
  const int32_t row = group * 64 + (tid / 32 % 4) * 16 + tid % 32 / 4;  // the thread's first weight row
#pragma unroll
  for (int i = 0; i < kValues; ++i) store_value(y, m, n, n0, row, i, sums[i]);
#else
  __trap();
#endif
}

// Splits of K for a weight of n rows and the given k slices at kTokens padded rows: enough blocks
// to fill the GPU once (a second wave would cost as much as the first), no more than kMaxSplitRows
// allows, and no split longer than its scales' room.
int32_t splits_for(int64_t n, int32_t slices, int tokens) {
  const auto tiles = static_cast<int32_t>((n + kTileRows - 1) / kTileRows);
  const int32_t filling = std::max<int32_t>(1, multiprocessor_count() / tiles);
  const int32_t needed = (slices + kMaxSplitSlices - 1) / kMaxSplitSlices;
  return std::max(needed, std::min({filling, kMaxSplitRows / tokens, slices}));
}

int tokens_for(int64_t num_rows) { return num_rows <= 16 ? 16 : num_rows <= 32 ? 32 : 64; }

template <int kTokens>
void launch(const Fp8Rows& x, const WeightView& w, int64_t num_rows, float* y, void* workspace, cudaStream_t stream) {
  static const bool configured = [] {
    DI_CUDA_CHECK(cudaFuncSetAttribute(fp8_swapped_gemm_kernel<kTokens>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       Layout<kTokens>::kSharedBytes));
    return true;
  }();
  (void)configured;
  const auto slices = static_cast<int32_t>(w.cols / kSliceK);
  const int32_t splits = splits_for(w.rows, slices, kTokens);
  const auto tiles = static_cast<int32_t>((w.rows + kTileRows - 1) / kTileRows);
  const CUtensorMap w_map = wgmma_operand_map(w.data, w.rows, w.cols, kTileRows, DType::kF8E4M3);
  const CUtensorMap x_map = wgmma_operand_map(x.codes, num_rows, w.cols, kTokens, DType::kF8E4M3);
  auto* counters = static_cast<uint32_t*>(workspace);
  auto* partials = reinterpret_cast<float*>(static_cast<char*>(workspace) + kFp8SwappedCounterBytes);
  launch_dependent(fp8_swapped_gemm_kernel<kTokens>, dim3(static_cast<unsigned>(tiles * splits)), dim3(kThreads),
                   Layout<kTokens>::kSharedBytes, stream, w_map, x_map, static_cast<const float*>(w.scales), x.scales,
                   static_cast<int32_t>(num_rows), static_cast<int32_t>(w.rows), slices, splits, partials, counters, y);
}

}  // namespace

bool fp8_swapped_gemm_fits(const WeightView& w, int64_t num_rows) {
  return num_rows >= 1 && num_rows <= kFp8SwappedMaxRows && fp8_layout_supported(w) &&
         w.scale_block_rows == kTileRows && w.cols <= int64_t{kMaxSplits} * kMaxSplitSlices * kSliceK &&
         static_cast<size_t>((w.rows + kTileRows - 1) / kTileRows) * sizeof(uint32_t) <= kFp8SwappedCounterBytes &&
         grouped_gemm_wgmma_supported();
}

size_t fp8_swapped_workspace_bytes(const WeightView& w, int64_t num_rows) {
  const int tokens = tokens_for(num_rows);
  const auto tiles = static_cast<size_t>((w.rows + kTileRows - 1) / kTileRows);
  const auto splits = static_cast<size_t>(splits_for(w.rows, static_cast<int32_t>(w.cols / kSliceK), tokens));
  return kFp8SwappedCounterBytes + (splits > 1 ? tiles * splits * kTileRows * tokens * sizeof(float) : 0);
}

void fp8_swapped_gemm(const Fp8Rows& x, const WeightView& w, int64_t num_rows, float* y, void* workspace,
                      cudaStream_t stream) {
  DI_CHECK(fp8_swapped_gemm_fits(w, num_rows),
           "fp8_swapped_gemm: " << num_rows << " rows of a [" << w.rows << ", " << w.cols << "] weight");
  switch (tokens_for(num_rows)) {
    case 16:
      launch<16>(x, w, num_rows, y, workspace, stream);
      break;
    case 32:
      launch<32>(x, w, num_rows, y, workspace, stream);
      break;
    default:
      launch<64>(x, w, num_rows, y, workspace, stream);
  }
}

}  // namespace deepinfer::kernels::cuda
