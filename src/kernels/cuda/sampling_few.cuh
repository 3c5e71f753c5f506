// The device sampler's path for a small top_k: top_p and the draw over the kept tokens alone,
// in shared memory (kernels/cuda/sampling.cu runs it after its top_k select).
#pragma once

#include "kernels/cuda/sampling_block.cuh"

namespace deepinfer::kernels::cuda::sampling_detail {

// top_p (if < 1) and the draw when top_k left at most kThreads tokens: the same sums as
// keep_most_likely and inverse_cdf, over the kept tokens alone (the others add exact zeros),
// without passes over the row. Kept keys in thread_best, their probabilities in stage[0, kThreads),
// by id in sorted_id and stage[kThreads, 2 kThreads).
__device__ inline int sample_few(const Row& row, double top_p, double u, Shared& sh) {
  constexpr int kChunk = static_cast<int>(kCdfChunk);
  u64* keys = sh.thread_best;
  double* probs = sh.stage;
  double* sorted_p = sh.stage + kThreads;
  if (threadIdx.x == 0) sh.counter = 0;
  __syncthreads();
  const unsigned lane = threadIdx.x % 32;
  for (int base = 0; base < row.vocab; base += kThreads) {
    const int i = base + static_cast<int>(threadIdx.x);
    u64 key = 0;
    double p = 0.0;
    if (i < row.vocab) {
      const float logit = row.logits[i];
      key = rank_key(logit, i);
      if (key >= row.lo_key) p = prob_of(row, logit, key);
    }
    const unsigned ballot = __ballot_sync(kFull, p > 0.0);
    int first = 0;
    if (lane == 0 && ballot != 0) first = atomicAdd(&sh.counter, __popc(ballot));
    first = __shfl_sync(kFull, first, 0);
    if (p > 0.0) {
      const int slot = first + __popc(ballot & ((1u << lane) - 1));
      keys[slot] = key;
      probs[slot] = p;
    }
  }
  __syncthreads();
  const int n = sh.counter;  // <= top_k <= kThreads
  const int j = static_cast<int>(threadIdx.x);
  const u64 key = j < n ? keys[j] : 0;
  double p = j < n ? probs[j] : 0.0;
  if (top_p < 1.0) {
    const u64 total = block_sum_u64(j < n ? static_cast<u64>(p * 0x1p40) : 0, sh);
    const u64 scaled = static_cast<u64>(ldexp(top_p, 64));
    const u64 limit = __umul64hi(scaled, total) + (scaled * total != 0 ? 1 : 0);
    // keep_most_likely keeps a token iff the weight ranked above it is below the limit.
    u64 above = 0;
    for (int t = 0; t < n; ++t) above += keys[t] > key ? static_cast<u64>(probs[t] * 0x1p40) : 0;
    if (!(above < limit)) p = 0.0;
  }
  const int id = static_cast<int>(0xffffffffu - static_cast<unsigned>(key));
  if (j < n) {
    int rank = 0;
    for (int t = 0; t < n; ++t) rank += static_cast<int>(0xffffffffu - static_cast<unsigned>(keys[t])) < id ? 1 : 0;
    sh.sorted_id[rank] = id;
    sorted_p[rank] = p;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    double total = 0.0;
    int last_kept = -1;
    for (int t = 0; t < n;) {
      const int chunk = sh.sorted_id[t] / kChunk;
      double sum = 0.0;
      for (; t < n && sh.sorted_id[t] / kChunk == chunk; ++t) {
        sum += sorted_p[t];
        if (sorted_p[t] > 0.0) last_kept = sh.sorted_id[t];
      }
      total += sum;
    }
    const double target = u * total;
    int drawn = last_kept;  // u * total can round up to the total itself
    bool found = false;
    double before = 0.0;
    for (int t = 0; t < n && !found;) {
      const int start = t;
      const int chunk = sh.sorted_id[t] / kChunk;
      double sum = 0.0;
      for (; t < n && sh.sorted_id[t] / kChunk == chunk; ++t) sum += sorted_p[t];
      if (target < before + sum) {
        double within = 0.0;
        for (int s = start; s < t && !found; ++s) {
          within += sorted_p[s];
          if (target < before + within) {
            drawn = sh.sorted_id[s];
            found = true;
          }
        }
      }
      before += sum;
    }
    sh.drawn = drawn;
  }
  __syncthreads();
  return sh.drawn;
}

}  // namespace deepinfer::kernels::cuda::sampling_detail
