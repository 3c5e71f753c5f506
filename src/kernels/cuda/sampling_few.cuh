// The device sampler's path for a small top_k: top_p and the draw over the kept tokens alone,
// in shared memory (kernels/cuda/sampling.cu runs it after its top_k select, over a row or over
// the candidates of a row's chunks), and the gathers that bring those tokens there.
#pragma once

#include <climits>

#include "kernels/cuda/sampling_block.cuh"

namespace deepinfer::kernels::cuda::sampling_detail {

// Appends the tokens of the row's [begin, end) ranked at least row.lo_key with a probability > 0
// to sh.thread_best (keys) and sh.stage (probabilities); returns how many there are, of which the
// first kThreads found are stored.
__device__ inline int gather_kept(const Row& row, Shared& sh) {
  __syncthreads();  // thread_best and stage may hold an earlier step's data
  if (threadIdx.x == 0) sh.counter = 0;
  __syncthreads();
  for (int base = row.begin; base < row.end; base += kThreads) {
    const int i = base + static_cast<int>(threadIdx.x);
    u64 key = 0;
    double p = 0.0;
    if (i < row.end) {
      const float logit = row.logits[i];
      key = rank_key(logit, i);
      if (key >= row.lo_key) p = prob_of(row, logit, key);
    }
    const int slot = warp_slot(p > 0.0, &sh.counter);
    if (p > 0.0 && slot < kThreads) {
      sh.thread_best[slot] = key;
      sh.stage[slot] = p;
    }
  }
  __syncthreads();
  return sh.counter;
}

// As gather_kept over a list of n candidates of other blocks (device memory, read through L2):
// those ranked at least lo_key.
__device__ inline int gather_listed(int n, const u64* keys, const double* probs, u64 lo_key, Shared& sh) {
  __syncthreads();
  if (threadIdx.x == 0) sh.counter = 0;
  __syncthreads();
  for (int base = 0; base < n; base += kThreads) {
    const int j = base + static_cast<int>(threadIdx.x);
    const u64 key = j < n ? __ldcg(keys + j) : 0;
    const bool taken = j < n && key >= lo_key;
    const int slot = warp_slot(taken, &sh.counter);
    if (taken && slot < kThreads) {
      sh.thread_best[slot] = key;
      sh.stage[slot] = __ldcg(probs + j);
    }
  }
  __syncthreads();
  return sh.counter;
}

// The k-th best of the m distinct keys in sh.thread_best (k <= m <= kThreads), by counting.
__device__ inline u64 kth_listed_key(int m, int k, Shared& sh) {
  const int j = static_cast<int>(threadIdx.x);
  if (j < m) {
    const u64 key = sh.thread_best[j];
    int above = 0;
    for (int t = 0; t < m; ++t) above += sh.thread_best[t] > key ? 1 : 0;
    if (above == k - 1) sh.floor_key = key;
  }
  __syncthreads();
  return sh.floor_key;
}

// Keeps the first m entries of sh.thread_best / sh.stage ranked at least lo_key, packed at the
// front (in any order); returns how many.
__device__ inline int compact_listed(int m, u64 lo_key, Shared& sh) {
  const int j = static_cast<int>(threadIdx.x);
  const u64 key = j < m ? sh.thread_best[j] : 0;
  const double p = j < m ? sh.stage[j] : 0.0;
  const bool taken = j < m && key >= lo_key;
  __syncthreads();  // every entry is read before any moves
  if (threadIdx.x == 0) sh.counter = 0;
  __syncthreads();
  const int slot = warp_slot(taken, &sh.counter);
  if (taken) {
    sh.thread_best[slot] = key;
    sh.stage[slot] = p;
  }
  __syncthreads();
  return sh.counter;
}

// top_p (if < 1) and the draw over the n <= kThreads tokens top_k kept, keys in sh.thread_best and
// probabilities in sh.stage[0, n): the same sums as keep_most_likely and inverse_cdf, over the
// kept tokens alone (the others add exact zeros), without passes over the row. By id in sorted_id
// and stage[kThreads, 2 kThreads); then each token's running sum within its inverse-CDF chunk in
// stage[0, n) and the sum of the chunks before its own in stage[kThreads, 2 kThreads).
__device__ inline int sample_few_kept(int n, double top_p, double u, Shared& sh) {
  constexpr int kChunk = static_cast<int>(kCdfChunk);
  const u64* keys = sh.thread_best;
  const double* probs = sh.stage;
  double* sorted_p = sh.stage + kThreads;
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
  // The last id that can be drawn (u * total can round up to the total itself); the reduction's
  // barrier also ends every read of keys and probs.
  const int last_kept = block_max_int(j < n && p > 0.0 ? id : -1, sh);
  // Each chunk's sum in id order from 0, by the thread of its first token.
  double* within = sh.stage;
  const int chunk = j < n ? sh.sorted_id[j] / kChunk : -1;
  if (j < n && (j == 0 || sh.sorted_id[j - 1] / kChunk != chunk)) {
    double sum = 0.0;
    for (int t = j; t < n && sh.sorted_id[t] / kChunk == chunk; ++t) {
      sum += sorted_p[t];
      within[t] = sum;
    }
  }
  __syncthreads();
  // The chunk sums added in chunk order by one thread; loads eight ahead of the additions.
  if (threadIdx.x == 0) {
    double total = 0.0;
    for (int base = 0; base < n; base += 8) {
      double chunk_sum[8];
      bool ends[8];
#pragma unroll
      for (int q = 0; q < 8; ++q) {
        const int t = base + q;
        ends[q] = t < n && (t + 1 == n || sh.sorted_id[t + 1] / kChunk != sh.sorted_id[t] / kChunk);
        chunk_sum[q] = ends[q] ? within[t] : 0.0;
      }
#pragma unroll
      for (int q = 0; q < 8; ++q) {
        if (base + q >= n) break;
        sorted_p[base + q] = total;  // the sum of the chunks before its own
        if (ends[q]) total += chunk_sum[q];
      }
    }
    sh.total = total;
  }
  __syncthreads();
  // inverse_cdf draws the first token whose cumulative sum exceeds u * total. Running sums never
  // decrease (the probabilities are >= 0, rounding is monotone), so no token of a chunk the host
  // skips passes: the first token that passes is the host's.
  const double target = u * sh.total;
  const bool passes = j < n && target < sorted_p[j] + within[j];
  const int first = -block_max_int(passes ? -j : -INT_MAX, sh);  // the lowest passing sorted index
  return first == INT_MAX ? last_kept : sh.sorted_id[first];
}

}  // namespace deepinfer::kernels::cuda::sampling_detail
