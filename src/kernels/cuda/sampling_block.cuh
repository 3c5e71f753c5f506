// The device sampler's per-block pieces shared by sampling.cu and its .cuh parts: launch shape,
// shared memory, rank keys, one row's filters and probabilities, block-wide reductions.
#pragma once

#include "kernels/exp_f64.h"
#include "kernels/ops.h"

namespace deepinfer::kernels::cuda::sampling_detail {

using u64 = unsigned long long;

constexpr int kThreads = 1024;
constexpr int kWarps = kThreads / 32;
constexpr int kBins = 256;     // one radix digit of a rank key
constexpr int kStage = 2048;   // chunks of inverse_cdf: vocabularies up to 2048 * kCdfChunk
constexpr unsigned kFull = 0xffffffffu;

struct Shared {
  u64 bin_weight[kBins];
  u64 bin_last_key[kBins];  // a member's key: the member itself when the bin has one
  unsigned bin_count[kBins];
  double stage[kStage];  // per-chunk cumulative sums of inverse_cdf
  double chunk_p[kCdfChunk];
  u64 thread_best[kThreads];  // kth_best_floor's offers; then gathered keys
  int sorted_id[kThreads];    // sample_few_kept
  u64 floor_key;
  u64 warp_u64[kWarps];
  float warp_value[kWarps];
  int warp_index[kWarps];
  int warp_count[kWarps];
  u64 before;    // weight ranked above the bins of the current level
  int boundary;  // the bin where the limit falls; -1: every token fits
  int counter;
  double total;
  int drawn;
  int list_base;   // where a chunk's candidates go in its draw's list
  float best_value;  // the row's maximum, for every thread of chunk_max_kernel's last block
  bool last_block;  // this block finishes its draw
};

// As kernels/ref/sampling.cpp's rank_key: logit descending, then id ascending, -0 equal to +0.
__device__ __forceinline__ u64 rank_key(float logit, int id) {
  unsigned bits = __float_as_uint(logit);
  if (bits == 0x80000000u) bits = 0;
  const unsigned ordered = (bits & 0x80000000u) != 0 ? ~bits : bits | 0x80000000u;
  return (static_cast<u64>(ordered) << 32) | (0xffffffffu - static_cast<unsigned>(id));
}

// One draw's row and the filters applied so far: tokens ranked below lo_key are dropped.
// [begin, end): the ids the selections read, a chunk of the row in split launches.
struct Row {
  const float* logits;
  int vocab;
  int begin;
  int end;
  double max_logit;
  double temperature;
  double min_p;
  u64 lo_key;
  double sure_kept;  // logit - max_logit above this: e^((logit - max) / T) is a normal double
};

__device__ __forceinline__ double prob_of(const Row& row, float logit, u64 key) {
  if (key < row.lo_key) return 0.0;
  const double p = exp_f64((static_cast<double>(logit) - row.max_logit) / row.temperature);
  return row.min_p > 0.0 && !(p >= row.min_p) ? 0.0 : p;
}

// prob_of(...) > 0, without the division and exp where the answer is certain.
__device__ __forceinline__ bool is_kept(const Row& row, float logit, u64 key) {
  if (key < row.lo_key) return false;
  const double delta = static_cast<double>(logit) - row.max_logit;
  if (row.min_p == 0.0 && delta > row.sure_kept) return true;
  const double p = exp_f64(delta / row.temperature);
  return row.min_p > 0.0 ? p >= row.min_p : p > 0.0;
}

// Every lane of the warp calls this: a distinct slot from *counter (shared memory) for each lane
// that takes one, one atomic per warp; meaningless for the others.
__device__ __forceinline__ int warp_slot(bool taken, int* counter) {
  const unsigned lane = threadIdx.x % 32;
  const unsigned ballot = __ballot_sync(kFull, taken);
  int first = 0;
  if (lane == 0 && ballot != 0) first = atomicAdd(counter, __popc(ballot));
  first = __shfl_sync(kFull, first, 0);
  return first + __popc(ballot & ((1u << lane) - 1));
}

// The warp's best (value, index): the highest value, the lowest index among equal ones; every lane
// gets it.
__device__ __forceinline__ void warp_argmax(float* value, int* index) {
  for (int offset = 16; offset > 0; offset >>= 1) {
    const float other_value = __shfl_xor_sync(kFull, *value, offset);
    const int other_index = __shfl_xor_sync(kFull, *index, offset);
    if (other_value > *value || (other_value == *value && other_index < *index)) {
      *value = other_value;
      *index = other_index;
    }
  }
}

// The block's total of value; every thread calls it and gets the total.
__device__ inline u64 block_sum_u64(u64 value, Shared& sh) {
  for (int offset = 16; offset > 0; offset >>= 1) value += __shfl_xor_sync(kFull, value, offset);
  __syncthreads();
  if (threadIdx.x % 32 == 0) sh.warp_u64[threadIdx.x / 32] = value;
  __syncthreads();
  u64 total = 0;
  for (int w = 0; w < kWarps; ++w) total += sh.warp_u64[w];
  return total;
}

// The block's maximum of value; every thread calls it and gets the maximum.
__device__ inline int block_max_int(int value, Shared& sh) {
  for (int offset = 16; offset > 0; offset >>= 1) value = max(value, __shfl_xor_sync(kFull, value, offset));
  __syncthreads();
  if (threadIdx.x % 32 == 0) sh.warp_count[threadIdx.x / 32] = value;
  __syncthreads();
  for (int w = 0; w < kWarps; ++w) value = max(value, sh.warp_count[w]);
  return value;
}

}  // namespace deepinfer::kernels::cuda::sampling_detail
