// Mixture-of-experts bookkeeping on the device: grouping routed rows by expert (atomic counts, a
// one-block scan for run and tile offsets, atomic placement; all in one block for small batches),
// the rows' inputs gathered in grouped order for the grouped-GEMM products, the weighted combine
// in slot order, and strided row copies.
#include "core/check.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/dependent_launch.cuh"
#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/moe_group_rows.cuh"
#include "kernels/cuda/moe_ops.h"

namespace deepinfer::kernels::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kScanThreads = 1024;  // one expert per thread
constexpr int64_t kOneBlockRows = 8192;  // up to this many rows one block groups them all

__global__ void count_kernel(const int32_t* __restrict__ expert_ids, int64_t num_rows, int32_t num_experts,
                             int32_t* __restrict__ counts) {
  for (int64_t r = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; r < num_rows; r += int64_t{gridDim.x} * blockDim.x) {
    const int32_t e = expert_ids[r];
    if (e >= 0 && e < num_experts) atomicAdd(&counts[e], 1);
  }
}

__global__ void __launch_bounds__(kScanThreads)
    scan_kernel(int32_t num_experts, int32_t rows_per_tile, MoeGrouping grouping, int64_t* expert_token_counts) {
  __shared__ int2 warp_totals[32];
  const int32_t e = static_cast<int32_t>(threadIdx.x);
  const int32_t count = e < num_experts ? grouping.counts[e] : 0;
  const int32_t tiles = (count + rows_per_tile - 1) / rows_per_tile;
  const int2 prefix = block_inclusive_scan(make_int2(count, tiles), warp_totals);
  if (e < num_experts) {
    grouping.offsets[e + 1] = prefix.x;
    grouping.tile_offsets[e + 1] = prefix.y;
    grouping.cursor[e] = 0;
    for (int32_t t = prefix.y - tiles; t < prefix.y; ++t) grouping.tile_experts[t] = e;
    if (expert_token_counts != nullptr) expert_token_counts[e] += count;
  }
  if (e == 0) {
    grouping.offsets[0] = 0;
    grouping.tile_offsets[0] = 0;
  }
}

__global__ void place_kernel(const int32_t* __restrict__ expert_ids, int64_t num_rows, int32_t num_experts,
                             MoeGrouping grouping) {
  for (int64_t r = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; r < num_rows; r += int64_t{gridDim.x} * blockDim.x) {
    const int32_t e = expert_ids[r];
    int32_t position = -1;
    if (e >= 0 && e < num_experts) {
      position = grouping.offsets[e] + atomicAdd(&grouping.cursor[e], 1);
      grouping.rows[position] = static_cast<int32_t>(r);
    }
    grouping.position[r] = position;
  }
}

// The whole grouping in one block (decode-sized batches): shared-memory counters, the scan and
// the placement, one dependent launch instead of four.
__global__ void __launch_bounds__(kScanThreads)
    group_one_block_kernel(const int32_t* __restrict__ expert_ids, int32_t num_rows, int32_t num_experts,
                           int32_t rows_per_tile, MoeGrouping grouping, int64_t* expert_token_counts) {
  __shared__ int32_t counts_s[kScanThreads];
  __shared__ int32_t cursor_s[kScanThreads];
  wait_for_previous_grid();
  allow_next_grid();
  group_rows_in_block(expert_ids, num_rows, num_experts, rows_per_tile, grouping, expert_token_counts, counts_s,
                      cursor_s);
}

// The token's slots (grouped row, weight) are read once into shared memory, so the loads of y for
// all slots of an element are independent (at batch 1 a chain of dependent loads per slot was
// most of this kernel's time); the sum still runs in slot order. A token's row is split over
// gridDim.y blocks, so one token's combine does not run on one SM. kValues consecutive values a
// thread: 8 for a 16-bit y with 16-byte rows (16-byte loads, two float4 stores), else 1.
template <typename T, int kValues>
__global__ void combine_kernel(const T* __restrict__ y, const int32_t* __restrict__ position,
                               const float* __restrict__ expert_weights, int32_t top_k, int64_t hidden,
                               float* __restrict__ out) {
  static_assert(kValues == 1 || kValues * sizeof(T) == 16, "one value or 16 bytes a thread");
  __shared__ int32_t row_s[kMoeMaxTopK];
  __shared__ float weight_s[kMoeMaxTopK];
  const int64_t token = blockIdx.x;
  wait_for_previous_grid();
  allow_next_grid();
  if (threadIdx.x < static_cast<unsigned>(top_k)) {
    const int64_t slot = token * top_k + threadIdx.x;
    row_s[threadIdx.x] = position != nullptr ? position[slot] : static_cast<int32_t>(slot);
    weight_s[threadIdx.x] = expert_weights[token * top_k + threadIdx.x];
  }
  __syncthreads();
  for (int64_t i = kValues * (blockIdx.y * int64_t{blockDim.x} + threadIdx.x); i < hidden;
       i += kValues * int64_t{gridDim.y} * blockDim.x) {
    float total[kValues] = {};
    for (int32_t j = 0; j < top_k; ++j) {
      const int32_t row = row_s[j];
      if (row < 0) continue;
      T values[kValues];
      if constexpr (kValues == 1) {
        values[0] = y[row * hidden + i];
      } else {
        *reinterpret_cast<uint4*>(values) = *reinterpret_cast<const uint4*>(y + row * hidden + i);
      }
#pragma unroll
      for (int v = 0; v < kValues; ++v) total[v] += weight_s[j] * to_float(values[v]);
    }
    if constexpr (kValues == 1) {
      out[token * hidden + i] = total[0];
    } else {
      auto* dst = reinterpret_cast<float4*>(out + token * hidden + i);
      dst[0] = make_float4(total[0], total[1], total[2], total[3]);
      dst[1] = make_float4(total[4], total[5], total[6], total[7]);
    }
  }
}

// A thread per (token, 4 values): reads them once (16-byte loads), rounds them, and writes them to
// each of the token's grouped rows (8-byte stores); a thread per grouped row read x top_k times.
template <typename T>
__global__ void gather_grouped_rows_kernel(const float4* __restrict__ x, const int32_t* __restrict__ position,
                                           int64_t num_tokens, int32_t top_k, int64_t pieces, T* __restrict__ out) {
  struct alignas(4 * sizeof(T)) Four {
    T values[4];
  };
  auto* out_pieces = reinterpret_cast<Four*>(out);
  const int64_t count = num_tokens * pieces;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < count; i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t token = i / pieces;
    const float4 v = x[i];
    const Four rounded{{from_float<T>(v.x), from_float<T>(v.y), from_float<T>(v.z), from_float<T>(v.w)}};
    for (int32_t j = 0; j < top_k; ++j) {
      const int32_t row = position[token * top_k + j];
      if (row >= 0) out_pieces[row * pieces + (i - token * pieces)] = rounded;
    }
  }
}

}  // namespace

void gather_grouped_rows(const float* x, const int32_t* position, int64_t num_tokens, int32_t top_k, int64_t hidden,
                         DType dtype, void* out, cudaStream_t stream) {
  if (num_tokens * hidden == 0) return;
  DI_CHECK(dtype == DType::kBF16 || dtype == DType::kF16, "gather_grouped_rows rounds to bf16 or f16");
  DI_CHECK(hidden % 4 == 0 && reinterpret_cast<uintptr_t>(x) % 16 == 0 && reinterpret_cast<uintptr_t>(out) % 8 == 0,
           "gather_grouped_rows reads rows of a multiple of 4 floats from 16-byte aligned memory");
  const int64_t pieces = hidden / 4;
  const unsigned blocks = grid_for(num_tokens * pieces, kThreads);
  const auto* x4 = reinterpret_cast<const float4*>(x);
  if (dtype == DType::kBF16) {
    gather_grouped_rows_kernel<<<blocks, kThreads, 0, stream>>>(x4, position, num_tokens, top_k, pieces,
                                                                static_cast<__nv_bfloat16*>(out));
  } else {
    gather_grouped_rows_kernel<<<blocks, kThreads, 0, stream>>>(x4, position, num_tokens, top_k, pieces,
                                                                static_cast<__half*>(out));
  }
  DI_CUDA_CHECK_LAUNCH("gather_grouped_rows_kernel");
}

int64_t moe_grouping_ints(int32_t num_experts, int64_t num_rows) { return 5 * int64_t{num_experts} + 2 + 3 * num_rows; }

MoeGrouping carve_moe_grouping(int32_t* ints, int32_t num_experts, int64_t num_rows) {
  MoeGrouping grouping;
  grouping.counts = ints;
  grouping.offsets = grouping.counts + num_experts;
  grouping.tile_offsets = grouping.offsets + num_experts + 1;
  grouping.cursor = grouping.tile_offsets + num_experts + 1;
  grouping.rows = grouping.cursor + num_experts;
  grouping.position = grouping.rows + num_rows;
  grouping.tile_experts = grouping.position + num_rows;
  return grouping;
}

void group_by_expert(const int32_t* expert_ids, int64_t num_rows, int32_t num_experts, int32_t rows_per_tile,
                     const MoeGrouping& grouping, int64_t* expert_token_counts, cudaStream_t stream) {
  DI_CHECK(num_experts >= 1 && num_experts <= kScanThreads, "grouping takes 1.." << kScanThreads << " experts");
  if (num_rows <= kOneBlockRows) {
    launch_dependent(group_one_block_kernel, dim3(1), dim3(kScanThreads), 0, stream, expert_ids,
                     static_cast<int32_t>(num_rows), num_experts, rows_per_tile, grouping, expert_token_counts);
    return;
  }
  DI_CUDA_CHECK(cudaMemsetAsync(grouping.counts, 0, static_cast<size_t>(num_experts) * sizeof(int32_t), stream));
  const unsigned blocks = grid_for(num_rows, kThreads);
  if (num_rows > 0) {
    count_kernel<<<blocks, kThreads, 0, stream>>>(expert_ids, num_rows, num_experts, grouping.counts);
    DI_CUDA_CHECK_LAUNCH("count_kernel");
  }
  scan_kernel<<<1, kScanThreads, 0, stream>>>(num_experts, rows_per_tile, grouping, expert_token_counts);
  DI_CUDA_CHECK_LAUNCH("scan_kernel");
  if (num_rows > 0) {
    place_kernel<<<blocks, kThreads, 0, stream>>>(expert_ids, num_rows, num_experts, grouping);
    DI_CUDA_CHECK_LAUNCH("place_kernel");
  }
}

void moe_combine(const void* y, DType y_dtype, const int32_t* position, const float* expert_weights,
                 int64_t num_tokens, int32_t top_k, int64_t hidden, float* out, cudaStream_t stream) {
  if (num_tokens == 0) return;
  DI_CHECK(top_k >= 1 && top_k <= kMoeMaxTopK, "moe_combine takes 1.." << kMoeMaxTopK << " slots per token");
  const dim3 grid(static_cast<unsigned>(num_tokens), static_cast<unsigned>((hidden + kThreads - 1) / kThreads));
  const dim3 block(kThreads);
  const bool vector = y_dtype != DType::kF32 && hidden % 8 == 0 && reinterpret_cast<uintptr_t>(y) % 16 == 0 &&
                      reinterpret_cast<uintptr_t>(out) % 16 == 0;
  const dim3 vector_grid(static_cast<unsigned>(num_tokens),
                         static_cast<unsigned>((hidden / 8 + kThreads - 1) / kThreads));
  switch (y_dtype) {
    case DType::kF32:
      launch_dependent(combine_kernel<float, 1>, grid, block, 0, stream, static_cast<const float*>(y), position,
                       expert_weights, top_k, hidden, out);
      break;
    case DType::kBF16:
      launch_dependent(vector ? combine_kernel<__nv_bfloat16, 8> : combine_kernel<__nv_bfloat16, 1>,
                       vector ? vector_grid : grid, block, 0, stream, static_cast<const __nv_bfloat16*>(y), position,
                       expert_weights, top_k, hidden, out);
      break;
    case DType::kF16:
      launch_dependent(vector ? combine_kernel<__half, 8> : combine_kernel<__half, 1>, vector ? vector_grid : grid,
                       block, 0, stream, static_cast<const __half*>(y), position, expert_weights, top_k, hidden, out);
      break;
    default: DI_CHECK(false, "moe_combine: y of " << dtype_name(y_dtype));
  }
}

void copy_rows(const float* src, int64_t src_stride, int64_t num_rows, int64_t width, float* dst, int64_t dst_stride,
               cudaStream_t stream) {
  if (num_rows == 0 || width == 0) return;
  DI_CUDA_CHECK(cudaMemcpy2DAsync(dst, static_cast<size_t>(dst_stride) * sizeof(float), src,
                                  static_cast<size_t>(src_stride) * sizeof(float),
                                  static_cast<size_t>(width) * sizeof(float), static_cast<size_t>(num_rows),
                                  cudaMemcpyDeviceToDevice, stream));
}

}  // namespace deepinfer::kernels::cuda
