// sample_rows on the GPU, one block per draw, choosing exactly as kernels/ref/sampling.cpp does:
// the same rank keys (logit, then lower id), the same integer weights for top_k and top_p (so the
// kept set is found by a radix select over the keys, 8 bits a level, instead of a sort), and the
// same float64 cumulative sum in token-id order over the kept tokens for the draw, and the same
// exp (kernels/exp_f64.h): every probability has the host's bits, so every draw is the host's.
// Each row's probabilities are computed once, by all threads, into the workspace (the float64 exp
// dominates: top_p and the draw's serial per-chunk walks then only read them).
#include <algorithm>
#include <climits>
#include <cmath>

#include "core/check.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/dependent_launch.cuh"
#include "kernels/cuda/sampling.h"
#include "kernels/cuda/sampling_block.cuh"
#include "kernels/cuda/sampling_few.cuh"
#include "kernels/exp_f64.h"

namespace deepinfer::kernels::cuda {
namespace {

using namespace sampling_detail;

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
__device__ void find_boundary(Shared& sh, u64 limit) {
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

// A key the k-th most likely kept token reaches for sure (k <= kThreads): the k-th best of the
// threads' best kept keys, as k threads each hold a kept token at least that high; 0 (no bound)
// when fewer than k threads hold one. Tokens below it cannot change top_k's choice, so they skip
// the histograms (where the bulk of a row would crowd a few bins).
__device__ u64 top_k_floor(const Row& row, int k, Shared& sh) {
  u64 best = 0;
  for (int i = static_cast<int>(threadIdx.x); i < row.vocab; i += kThreads) {
    const float logit = row.logits[i];
    const u64 key = rank_key(logit, i);
    if (key > best && is_kept(row, logit, key)) best = key;
  }
  sh.thread_best[threadIdx.x] = best;
  if (threadIdx.x == 0) sh.floor_key = 0;
  __syncthreads();
  int above = 0;
  for (int t = 0; t < kThreads; ++t) above += sh.thread_best[t] > best ? 1 : 0;
  if (above == k - 1 && best != 0) sh.floor_key = best;  // distinct keys: one thread at most
  __syncthreads();
  return sh.floor_key;
}

// The lowest rank key kept when tokens are taken most likely first while the weight taken before
// each is below limit (kernels/ref/sampling.cpp keep_most_likely); row.lo_key when all fit.
// kUnits: weight = probability in units of 2^-40 (top_p); else 1 per token (top_k), where tokens
// ranked below floor_key are known to fall below the limit and are left out.
// prob: the row's prob_of values (read when kUnits).
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
    if (i >= row.vocab) return;
    const float logit = row.logits[i];
    *key = rank_key(logit, i);
    if (only_bin < 0 || static_cast<int>(*key >> 56) == only_bin) *weight = member_weight(logit, *key, i, member);
  };
  clear_bins(sh);
  if (threadIdx.x == 0) sh.before = 0;
  __syncthreads();
  for (int base = 0; base < row.vocab; base += kThreads) {
    bool member;
    u64 key;
    u64 weight;
    read_entry(base + static_cast<int>(threadIdx.x), -1, &member, &key, &weight);
    add_to_bin(sh, member, static_cast<unsigned>(key >> 56), key, weight);
  }
  __syncthreads();
  if (threadIdx.x < 32) find_boundary(sh, limit);
  __syncthreads();
  int bin = sh.boundary;
  if (bin < 0) return row.lo_key;
  if (sh.bin_count[bin] == 1) return sh.bin_last_key[bin];

  // The boundary bin's members go to a list; the next levels read only it.
  if (threadIdx.x == 0) sh.counter = 0;
  __syncthreads();
  const unsigned lane = threadIdx.x % 32;
  for (int base = 0; base < row.vocab; base += kThreads) {
    bool member;
    u64 key;
    u64 weight;
    read_entry(base + static_cast<int>(threadIdx.x), bin, &member, &key, &weight);
    const unsigned ballot = __ballot_sync(kFull, member);
    int first = 0;
    if (lane == 0 && ballot != 0) first = atomicAdd(&sh.counter, __popc(ballot));
    first = __shfl_sync(kFull, first, 0);
    if (member) {
      const int slot = first + __popc(ballot & ((1u << lane) - 1));
      cand_key[slot] = key;
      cand_weight[slot] = weight;
    }
  }
  __syncthreads();
  const int n = sh.counter;
  u64 prefix = static_cast<u64>(bin);
  for (int shift = 48; shift >= 0; shift -= 8) {
    __syncthreads();  // everyone has read the previous level's bins
    clear_bins(sh);
    __syncthreads();
    for (int base = 0; base < n; base += kThreads) {
      const int j = base + static_cast<int>(threadIdx.x);
      const u64 key = j < n ? cand_key[j] : 0;
      const bool member = j < n && (key >> (shift + 8)) == prefix;
      add_to_bin(sh, member, static_cast<unsigned>((key >> shift) & 0xff), key, member ? cand_weight[j] : 0);
    }
    __syncthreads();
    if (threadIdx.x < 32) find_boundary(sh, limit);
    __syncthreads();
    bin = sh.boundary;  // exists: the weight under this prefix reaches the limit
    if (bin < 0 || sh.bin_count[bin] == 1) break;
    prefix = (prefix << 8) | static_cast<u64>(bin);
  }
  return bin < 0 ? row.lo_key : sh.bin_last_key[bin];
}

// prob[i] = prob_of(...) for the whole row; visible to the block on return.
__device__ void fill_probs(const Row& row, double* prob) {
  for (int i = static_cast<int>(threadIdx.x); i < row.vocab; i += kThreads) {
    const float logit = row.logits[i];
    prob[i] = prob_of(row, logit, rank_key(logit, i));
  }
  __syncthreads();
}

// Drops the probabilities of tokens ranked below row.lo_key (the cut of a later filter).
__device__ void cut_probs(const Row& row, double* prob) {
  for (int i = static_cast<int>(threadIdx.x); i < row.vocab; i += kThreads) {
    if (rank_key(row.logits[i], i) < row.lo_key) prob[i] = 0.0;
  }
  __syncthreads();
}

// The highest logit, the lowest id among equal ones.
__device__ int argmax_row(const float* logits, int vocab, Shared& sh, float* best_value) {
  float value = -INFINITY;
  int index = INT_MAX;
  for (int i = static_cast<int>(threadIdx.x); i < vocab; i += kThreads) {
    const float v = logits[i];
    if (index == INT_MAX || v > value) {
      value = v;
      index = i;
    }
  }
  for (int offset = 16; offset > 0; offset >>= 1) {
    const float other_value = __shfl_xor_sync(kFull, value, offset);
    const int other_index = __shfl_xor_sync(kFull, index, offset);
    if (other_value > value || (other_value == value && other_index < index)) {
      value = other_value;
      index = other_index;
    }
  }
  __syncthreads();
  if (threadIdx.x % 32 == 0) {
    sh.warp_value[threadIdx.x / 32] = value;
    sh.warp_index[threadIdx.x / 32] = index;
  }
  __syncthreads();
  value = sh.warp_value[0];
  index = sh.warp_index[0];
  for (int w = 1; w < kWarps; ++w) {
    if (sh.warp_value[w] > value || (sh.warp_value[w] == value && sh.warp_index[w] < index)) {
      value = sh.warp_value[w];
      index = sh.warp_index[w];
    }
  }
  *best_value = value;
  return index;
}

// As kernels/ref/sampling.cpp's inverse_cdf, with the same additions in the same order: one
// thread sums each chunk of kCdfChunk ids from 0, one thread sums the chunk totals in order, and
// the chunk where the cumulative sum crosses u * total is walked by one thread. prob: the row's
// prob_of values.
__device__ int inverse_cdf(const Row& row, const double* prob, double u, Shared& sh) {
  constexpr int kChunk = static_cast<int>(kCdfChunk);
  const int num_chunks = (row.vocab + kChunk - 1) / kChunk;  // <= kStage, checked at launch
  int last_kept = -1;
  for (int c = static_cast<int>(threadIdx.x); c < num_chunks; c += kThreads) {
    double sum = 0.0;
    const int end = min(row.vocab, (c + 1) * kChunk);
    for (int i = c * kChunk; i < end; ++i) {
      const double p = prob[i];
      if (p > 0.0) last_kept = i;
      sum += p;
    }
    sh.stage[c] = sum;
  }
  for (int offset = 16; offset > 0; offset >>= 1) last_kept = max(last_kept, __shfl_xor_sync(kFull, last_kept, offset));
  __syncthreads();
  if (threadIdx.x % 32 == 0) sh.warp_count[threadIdx.x / 32] = last_kept;
  if (threadIdx.x == 0) {
    double total = 0.0;  // stage[c] becomes the sum up to and including chunk c
    for (int c = 0; c < num_chunks; ++c) {
      total += sh.stage[c];
      sh.stage[c] = total;
    }
    sh.total = total;
  }
  __syncthreads();
  for (int w = 0; w < kWarps; ++w) last_kept = max(last_kept, sh.warp_count[w]);
  const double target = u * sh.total;
  int first = INT_MAX;
  for (int c = static_cast<int>(threadIdx.x); c < num_chunks; c += kThreads) {
    if (target < sh.stage[c]) {
      first = c;
      break;
    }
  }
  for (int offset = 16; offset > 0; offset >>= 1) first = min(first, __shfl_xor_sync(kFull, first, offset));
  if (threadIdx.x % 32 == 0) sh.warp_index[threadIdx.x / 32] = first;
  __syncthreads();
  for (int w = 0; w < kWarps; ++w) first = min(first, sh.warp_index[w]);
  // u * total can round up to the total itself: the last kept token, as on the host.
  if (first == INT_MAX) return last_kept;
  const int i = first * kChunk + static_cast<int>(threadIdx.x);
  if (threadIdx.x < kChunk) {
    double p = 0.0;
    if (i < row.vocab) p = prob[i];
    sh.chunk_p[threadIdx.x] = p;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    const double before = first == 0 ? 0.0 : sh.stage[first - 1];
    double within = 0.0;
    sh.drawn = last_kept;
    for (int j = 0; j < kChunk; ++j) {
      within += sh.chunk_p[j];
      if (target < before + within) {
        sh.drawn = first * kChunk + j;
        break;
      }
    }
  }
  __syncthreads();
  return sh.drawn;
}

__global__ void __launch_bounds__(kThreads) sample_rows_kernel(const float* logits, int vocab,
                                                                const SampleParams* params, int num_draws,
                                                                int32_t* token_ids, u64* workspace) {
  wait_for_previous_grid();
  allow_next_grid();
  __shared__ Shared sh;
  u64* cand_key = workspace + static_cast<size_t>(blockIdx.x) * 3 * static_cast<size_t>(vocab);
  u64* cand_weight = cand_key + vocab;
  auto* prob = reinterpret_cast<double*>(cand_weight + vocab);
  for (int d = static_cast<int>(blockIdx.x); d < num_draws; d += static_cast<int>(gridDim.x)) {
    const SampleParams p = params[d];
    Row row;
    row.logits = logits + static_cast<int64_t>(p.row) * vocab;
    row.vocab = vocab;
    float best_value = 0.0f;
    const int best = argmax_row(row.logits, vocab, sh, &best_value);
    int token = best;
    if (p.temperature != 0.0 && p.top_k != 1) {
      row.max_logit = best_value;
      row.temperature = p.temperature;
      row.min_p = p.min_p;
      row.lo_key = 0;
      row.sure_kept = -700.0 * p.temperature;  // (delta / T) > -700 - rounding: e^-700 is normal
      if (p.top_k > 0 && p.top_k < vocab) {
        const u64 floor_key = p.top_k <= kThreads ? top_k_floor(row, p.top_k, sh) : 0;
        row.lo_key = select_lowest_kept<false>(row, static_cast<u64>(p.top_k), floor_key, sh, cand_key, cand_weight,
                                               prob);
      }
    }
    if (p.temperature != 0.0 && p.top_k > 1 && p.top_k < vocab && p.top_k <= kThreads) {
      token = sample_few(row, p.top_p, p.u, sh);
    } else if (p.temperature != 0.0 && p.top_k != 1) {
      fill_probs(row, prob);
      if (p.top_p < 1.0) {
        u64 units = 0;
        for (int i = static_cast<int>(threadIdx.x); i < vocab; i += kThreads) {
          units += static_cast<u64>(prob[i] * 0x1p40);
        }
        const u64 total = block_sum_u64(units, sh);
        // ceil(top_p * total) from the 128-bit product, as the host computes it.
        const u64 scaled = static_cast<u64>(ldexp(p.top_p, 64));
        const u64 limit = __umul64hi(scaled, total) + (scaled * total != 0 ? 1 : 0);
        row.lo_key = select_lowest_kept<true>(row, limit, 0, sh, cand_key, cand_weight, prob);
        cut_probs(row, prob);
      }
      token = inverse_cdf(row, prob, p.u, sh);
    }
    if (threadIdx.x == 0) token_ids[d] = token;
    __syncthreads();  // the shared state is the next draw's
  }
}

int32_t num_blocks(int64_t num_draws, int32_t num_sms) {
  return static_cast<int32_t>(std::max<int64_t>(1, std::min<int64_t>(num_draws, std::max(num_sms, 1))));
}

}  // namespace

size_t sample_rows_workspace_bytes(int64_t vocab, int64_t num_draws, int32_t num_sms) {
  return static_cast<size_t>(num_blocks(num_draws, num_sms)) * 3 * static_cast<size_t>(vocab) * sizeof(u64);
}

void sample_rows(const float* logits, int64_t vocab, const SampleParams* params, int64_t num_draws,
                 int32_t* token_ids, void* workspace, int32_t num_sms, cudaStream_t stream) {
  if (num_draws == 0) return;
  launch_dependent(sample_rows_kernel, dim3(static_cast<unsigned>(num_blocks(num_draws, num_sms))), dim3(kThreads), 0,
                   stream, logits, static_cast<int>(vocab), params, static_cast<int>(num_draws), token_ids,
                   static_cast<u64*>(workspace));
  DI_CUDA_CHECK_LAUNCH("sample_rows_kernel");
}

}  // namespace deepinfer::kernels::cuda
