// The device sampler's threshold selections: the lowest rank key kept when tokens are taken most
// likely first under a weight limit (kernels/ref/sampling.cpp keep_most_likely), by a radix select
// over the keys, 8 bits a level, over a row's chunk or over a list of candidates.
#pragma once

#include "kernels/cuda/sampling_block.cuh"

namespace deepinfer::kernels::cuda::sampling_detail {

// Every lane of the warp calls this. Adds a member's weight to its bin, one atomic per bin and
// warp (logits crowd into few bins: per-lane atomics would serialise).
__device__ __forceinline__ void add_to_bin(Shared& sh, bool member, unsigned bin, u64 key, u64 weight) {
  const unsigned active = __ballot_sync(kFull, member);
  if (!member) return;
  const unsigned peers = __match_any_sync(active, bin);
  // Weights are at most 2^40: two 20-bit halves sum over 32 lanes without overflow.
  const unsigned low = __reduce_add_sync(peers, static_cast<unsigned>(weight & 0xfffff));
  const unsigned high = __reduce_add_sync(peers, static_cast<unsigned>(weight >> 20));
  const unsigned lane = threadIdx.x % 32;
  if ((peers & ((1u << lane) - 1)) == 0) {
    atomicAdd(&sh.bin_weight[bin], (static_cast<u64>(high) << 20) + low);
    atomicAdd(&sh.bin_count[bin], static_cast<unsigned>(__popc(peers)));
    sh.bin_last_key[bin] = key;
  }
}

__device__ __forceinline__ void clear_bins(Shared& sh) {
  for (int b = threadIdx.x; b < kBins; b += kThreads) {
    sh.bin_weight[b] = 0;
    sh.bin_count[b] = 0;
  }
}

// Warp 0: the highest bin b with before + weight(bins >= b) >= limit, and the weight above it
// (the host sampler's bucket walk). Lane l holds bins 8l..8l+7.
__device__ inline void find_boundary(Shared& sh, u64 limit) {
  const int lane = static_cast<int>(threadIdx.x);
  u64 local = 0;
  for (int k = 0; k < 8; ++k) local += sh.bin_weight[lane * 8 + k];
  u64 suffix = local;  // lanes >= lane
  for (int offset = 1; offset < 32; offset <<= 1) {
    const u64 other = __shfl_down_sync(kFull, suffix, offset);
    if (lane + offset < 32) suffix += other;
  }
  u64 above = sh.before + suffix - local;
  int found = -1;
  if (above < limit && above + local >= limit) {
    for (int k = 7; k >= 0; --k) {
      const u64 weight = sh.bin_weight[lane * 8 + k];
      if (above + weight >= limit) {
        found = lane * 8 + k;
        break;
      }
      above += weight;
    }
  }
  const unsigned who = __ballot_sync(kFull, found >= 0);
  if (who == 0) {
    if (lane == 0) sh.boundary = -1;
  } else if (lane == __ffs(who) - 1) {
    sh.boundary = found;
    sh.before = above;
  }
}

// A key at least k entries of [begin, end) reach (k <= kThreads), where key_of(i) is entry i's
// key, 0 when it does not count: each warp offers its ceil(k / kWarps) best thread maxima (distinct
// entries), and the k-th best offer is the bound. 0 (no bound) when fewer than k offers are
// entries. Entries below it cannot change a top-k choice, so they skip the histograms (where the
// bulk of a row would crowd a few bins).
template <typename KeyOf>
__device__ u64 kth_best_floor(int begin, int end, int k, KeyOf key_of, Shared& sh) {
  u64 best = 0;
  for (int i = begin + static_cast<int>(threadIdx.x); i < end; i += kThreads) {
    const u64 key = key_of(i);
    if (key > best) best = key;
  }
  const int per_warp = (k + kWarps - 1) / kWarps;
  const int warp = static_cast<int>(threadIdx.x) / 32;
  __syncthreads();  // thread_best may hold an earlier step's data
  for (int r = 0; r < per_warp; ++r) {
    u64 top = best;
    for (int offset = 16; offset > 0; offset >>= 1) top = max(top, __shfl_xor_sync(kFull, top, offset));
    if (threadIdx.x % 32 == 0) sh.thread_best[warp * per_warp + r] = top;
    if (best == top) best = 0;  // keys are distinct: only the holder of a nonzero top
  }
  if (threadIdx.x == 0) sh.floor_key = 0;
  __syncthreads();
  const int offers = kWarps * per_warp;
  if (static_cast<int>(threadIdx.x) < offers) {
    const u64 offer = sh.thread_best[threadIdx.x];
    int above = 0;
    for (int t = 0; t < offers; ++t) above += sh.thread_best[t] > offer ? 1 : 0;
    if (above == k - 1 && offer != 0) sh.floor_key = offer;  // distinct offers: one thread at most
  }
  __syncthreads();
  return sh.floor_key;
}

// kth_best_floor over the kept tokens of the row's [begin, end).
__device__ inline u64 top_k_floor(const Row& row, int k, Shared& sh) {
  return kth_best_floor(
      row.begin, row.end, k,
      [&](int i) -> u64 {
        const float logit = row.logits[i];
        const u64 key = rank_key(logit, i);
        return is_kept(row, logit, key) ? key : 0;
      },
      sh);
}

// The radix select over a list of n entries: the lowest key kept (weight taken before it below
// limit), 0 when every entry fits. top_bin < 0: all entries at least floor_key take part, with
// `before` the weight ranked above them all; else only those whose top byte is top_bin, with
// sh.before the weight ranked above that byte. keys, weights: device memory another block may
// have written (read through L2); weights null: 1 each.
__device__ inline u64 select_in_list(int n, const u64* keys, const u64* weights, u64 limit, u64 floor_key, int top_bin,
                                     u64 before, Shared& sh) {
  u64 prefix = static_cast<u64>(top_bin);
  int bin = top_bin;
  for (int shift = top_bin < 0 ? 56 : 48; shift >= 0; shift -= 8) {
    __syncthreads();  // everyone has read the previous level's bins
    clear_bins(sh);
    if (shift == 56 && threadIdx.x == 0) sh.before = before;
    __syncthreads();
    for (int base = 0; base < n; base += kThreads) {
      const int j = base + static_cast<int>(threadIdx.x);
      const u64 key = j < n ? __ldcg(keys + j) : 0;
      const bool member = j < n && key >= floor_key && (shift == 56 || (key >> (shift + 8)) == prefix);
      const u64 weight = !member ? 0 : weights != nullptr ? __ldcg(weights + j) : 1;
      add_to_bin(sh, member, static_cast<unsigned>((key >> shift) & 0xff), key, weight);
    }
    __syncthreads();
    if (threadIdx.x < 32) find_boundary(sh, limit);
    __syncthreads();
    bin = sh.boundary;
    if (bin < 0 || sh.bin_count[bin] == 1) break;
    prefix = shift == 56 ? static_cast<u64>(bin) : (prefix << 8) | static_cast<u64>(bin);
  }
  return bin < 0 ? 0 : sh.bin_last_key[bin];
}

// The lowest rank key kept in the row's [begin, end) when tokens are taken most likely first while
// the weight taken before each is below limit; row.lo_key when all fit. kUnits: weight =
// probability in units of 2^-40 (top_p), prob: the row's prob_of values; else 1 per token (top_k),
// where tokens ranked below floor_key are known to fall below the limit and are left out.
// cand_key, cand_weight: room for end - begin entries.
template <bool kUnits>
__device__ u64 select_lowest_kept(const Row& row, u64 limit, u64 floor_key, Shared& sh, u64* cand_key,
                                  u64* cand_weight, const double* prob) {
  const auto member_weight = [&](float logit, u64 key, int i, bool* member) -> u64 {
    if (!kUnits) {
      *member = key >= floor_key && is_kept(row, logit, key);
      return 1;
    }
    const double p = prob[i];
    *member = p > 0.0;
    return static_cast<u64>(p * 0x1p40);
  };
  // Entry i's rank key, and its membership and weight when its top byte is only_bin (any when < 0).
  const auto read_entry = [&](int i, int only_bin, bool* member, u64* key, u64* weight) {
    *member = false;
    *key = 0;
    *weight = 0;
    if (i >= row.end) return;
    const float logit = row.logits[i];
    *key = rank_key(logit, i);
    if (only_bin < 0 || static_cast<int>(*key >> 56) == only_bin) *weight = member_weight(logit, *key, i, member);
  };
  __syncthreads();  // the bins may hold an earlier step's data
  clear_bins(sh);
  if (threadIdx.x == 0) sh.before = 0;
  __syncthreads();
  for (int base = row.begin; base < row.end; base += kThreads) {
    bool member;
    u64 key;
    u64 weight;
    read_entry(base + static_cast<int>(threadIdx.x), -1, &member, &key, &weight);
    add_to_bin(sh, member, static_cast<unsigned>(key >> 56), key, weight);
  }
  __syncthreads();
  if (threadIdx.x < 32) find_boundary(sh, limit);
  __syncthreads();
  const int bin = sh.boundary;
  if (bin < 0) return row.lo_key;
  if (sh.bin_count[bin] == 1) return sh.bin_last_key[bin];

  // The boundary bin's members go to a list; the next levels read only it.
  if (threadIdx.x == 0) sh.counter = 0;
  __syncthreads();
  for (int base = row.begin; base < row.end; base += kThreads) {
    bool member;
    u64 key;
    u64 weight;
    read_entry(base + static_cast<int>(threadIdx.x), bin, &member, &key, &weight);
    const int slot = warp_slot(member, &sh.counter);
    if (member) {
      cand_key[slot] = key;
      cand_weight[slot] = weight;
    }
  }
  __syncthreads();
  // The list's members all start with bin; a later level always finds a boundary there.
  const u64 lowest = select_in_list(sh.counter, cand_key, kUnits ? cand_weight : nullptr, limit, 0, bin, 0, sh);
  return lowest == 0 ? row.lo_key : lowest;
}

}  // namespace deepinfer::kernels::cuda::sampling_detail
