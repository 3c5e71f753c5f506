// The device sampler's split launch for top_p alone (kernels/cuda/sampling.cu): per chunk the
// probabilities and a histogram of their integer weights over ratio bins; the last block finds
// the bin and key where the kept mass reaches the limit; a third kernel applies the cut per chunk.
#pragma once

#include "kernels/cuda/sampling_split.cuh"

namespace deepinfer::kernels::cuda::sampling_detail {

// top_p's first radix level in split launches, a range of rank keys per bin: 1/8 nat of
// probability ratio to the most likely token each (255: the most likely), 0 below e^-31.875.
// Monotone in the logit: a rounded difference and quotient never reverse an order.
__device__ __forceinline__ unsigned ratio_bin(const Row& row, float logit) {
  const double x = (row.max_logit - static_cast<double>(logit)) / row.temperature;
  return x < 32.0 ? 255u - static_cast<unsigned>(x * 8.0) : 0u;
}

// top_p alone: the chunk's probabilities and ratio bins (into the draw's rows of them) and its
// weight (probability in units of 2^-40) per bin, added to the draw's histogram.
__device__ __noinline__ inline void bin_chunk_mass(const Row& row, const DrawSpace& s, Shared& sh) {
  auto* prob = reinterpret_cast<double*>(s.scratch);
  clear_bins(sh);
  __syncthreads();
  for (int base = row.begin; base < row.end; base += kThreads) {
    const int i = base + static_cast<int>(threadIdx.x);
    bool member = false;
    unsigned bin = 0;
    u64 key = 0;
    u64 weight = 0;
    if (i < row.end) {
      const float logit = row.logits[i];
      key = rank_key(logit, i);
      const double p = prob_of(row, logit, key);
      prob[i] = p;
      member = p > 0.0;
      bin = ratio_bin(row, logit);
      weight = static_cast<u64>(p * 0x1p40);
      s.bins[i] = static_cast<unsigned char>(bin);
    }
    add_to_bin(sh, member, bin, key, weight);
  }
  __syncthreads();
  for (int b = static_cast<int>(threadIdx.x); b < kBins; b += kThreads) {
    if (sh.bin_weight[b] != 0) atomicAdd(s.hist + b, sh.bin_weight[b]);
  }
}

// The lowest key kept among n <= kThreads listed entries (distinct keys, integer weights, device
// memory) when they are taken most likely first while `before` plus the weight taken before each
// is below limit: each thread sums the weight ranked above its entry. 0 when none is kept.
__device__ inline u64 lowest_kept_listed(int n, const u64* keys, const u64* weights, u64 limit, u64 before, Shared& sh) {
  const int j = static_cast<int>(threadIdx.x);
  const u64 key = j < n ? __ldcg(keys + j) : 0;
  const u64 weight = j < n ? __ldcg(weights + j) : 0;
  __syncthreads();
  if (j < n) {
    sh.thread_best[j] = key;
    sh.stage[j] = static_cast<double>(weight);  // below 2^53: exact
  }
  __syncthreads();
  u64 lowest = ~0ull;
  if (j < n) {
    u64 above = before;
    for (int t = 0; t < n; ++t) above += sh.thread_best[t] > key ? static_cast<u64>(sh.stage[t]) : 0;
    if (above < limit) lowest = key;
  }
  for (int offset = 16; offset > 0; offset >>= 1) lowest = min(lowest, __shfl_xor_sync(kFull, lowest, offset));
  if (threadIdx.x % 32 == 0) sh.warp_u64[threadIdx.x / 32] = lowest;
  __syncthreads();
  for (int w = 0; w < kWarps; ++w) lowest = min(lowest, sh.warp_u64[w]);
  return lowest == ~0ull ? 0 : lowest;
}

// The last block of split_sample_kernel, top_p alone: the boundary bin from every chunk's bins
// (kernels/ref/sampling.cpp keep_top_p's limit) and the lowest key kept, by a radix select over
// its members, into the draw's workspace for split_cut_kernel.
__device__ __noinline__ inline void find_top_p_cut(const Row& row, const DrawSpace& s, const SampleParams& p,
                                                   Shared& sh) {
  const auto* prob = reinterpret_cast<double*>(s.scratch);
  __syncthreads();
  if (threadIdx.x == 0) sh.before = 0;
  u64 units = 0;
  for (int b = static_cast<int>(threadIdx.x); b < kBins; b += kThreads) {
    const u64 weight = __ldcg(s.hist + b);
    sh.bin_weight[b] = weight;
    units += weight;
    s.hist[b] = 0;  // for the next call
  }
  const u64 total = block_sum_u64(units, sh);  // synchronises: bin_weight is complete
  // ceil(top_p * total) from the 128-bit product, as the host computes it.
  const u64 scaled = static_cast<u64>(ldexp(p.top_p, 64));
  const u64 limit = __umul64hi(scaled, total) + (scaled * total != 0 ? 1 : 0);
  if (threadIdx.x < 32) find_boundary(sh, limit);
  __syncthreads();
  const int bin = sh.boundary;
  u64 lo_key = 0;
  if (bin >= 0) {
    const u64 before = sh.before;
    if (threadIdx.x == 0) sh.counter = 0;
    __syncthreads();
    // Sixteen bins a load; the members of the boundary bin go to the list.
    const unsigned pattern = static_cast<unsigned>(bin) * 0x01010101u;
    for (int base = 0; base < row.vocab; base += 16 * kThreads) {
      const int first_id = base + 16 * static_cast<int>(threadIdx.x);
      uint4 word = make_uint4(~pattern, ~pattern, ~pattern, ~pattern);
      if (first_id < row.vocab) word = __ldcg(reinterpret_cast<const uint4*>(s.bins + first_id));
      const unsigned words[4] = {word.x, word.y, word.z, word.w};
      unsigned hits = 0;  // bit q: id first_id + q is in the bin
      for (int w = 0; w < 4; ++w) {
        const unsigned equal = __vcmpeq4(words[w], pattern);
        for (int q = 0; q < 4; ++q) hits |= ((equal >> (8 * q)) & 1u) << (4 * w + q);
      }
      if (!__any_sync(kFull, hits != 0)) continue;
      for (int q = 0; q < 16; ++q) {
        const int i = first_id + q;
        bool member = false;
        u64 key = 0;
        u64 weight = 0;
        if (((hits >> q) & 1u) != 0 && i < row.vocab) {
          const double pi = __ldcg(prob + i);
          member = pi > 0.0;
          key = rank_key(row.logits[i], i);
          weight = static_cast<u64>(pi * 0x1p40);
        }
        const int slot = warp_slot(member, &sh.counter);
        if (member) {
          s.list_keys[slot] = key;
          reinterpret_cast<u64*>(s.list_probs)[slot] = weight;
        }
      }
    }
    __syncthreads();
    const int n = sh.counter;
    const auto* weights = reinterpret_cast<const u64*>(s.list_probs);
    lo_key = n <= kThreads ? lowest_kept_listed(n, s.list_keys, weights, limit, before, sh)
                           : select_in_list(n, s.list_keys, weights, limit, 0, -1, before, sh);
  }
  if (threadIdx.x == 0) {
    *s.boundary = bin;
    *s.lo_key = lo_key;
  }
}

// split_cut_kernel's step, top_p alone: drops the chunk's tokens ranked below the cut (their
// probabilities become 0, as the host's top_p leaves them), then its inverse-CDF chunk sums.
__device__ inline void cut_and_sum_chunk(const Row& row, const DrawSpace& s, int c, Shared& sh) {
  auto* prob = reinterpret_cast<double*>(s.scratch);
  const int bin = *s.boundary;
  const u64 lo_key = *s.lo_key;
  if (bin >= 0) {
    for (int i = row.begin + static_cast<int>(threadIdx.x); i < row.end; i += kThreads) {
      const int b = s.bins[i];
      if (b < bin || (b == bin && rank_key(row.logits[i], i) < lo_key)) prob[i] = 0.0;
    }
  }
  __syncthreads();
  sum_chunk_cdf(row, s, c, sh);
}

}  // namespace deepinfer::kernels::cuda::sampling_detail
