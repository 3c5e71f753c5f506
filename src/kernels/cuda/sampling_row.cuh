// The device sampler's one-block-per-row path: the row's argmax, filters, probabilities and the
// inverse-CDF draw, each as kernels/ref/sampling.cpp computes it (kernels/cuda/sampling.cu runs
// it for every draw at large batches and for the filter sets its split launch leaves to one block).
#pragma once

#include <climits>

#include "kernels/cuda/sampling_block.cuh"
#include "kernels/cuda/sampling_few.cuh"
#include "kernels/cuda/sampling_select.cuh"

namespace deepinfer::kernels::cuda::sampling_detail {

// The highest logit of [begin, end), the lowest id among equal ones.
__device__ inline int argmax_range(const float* logits, int begin, int end, Shared& sh, float* best_value) {
  float value = -INFINITY;
  int index = INT_MAX;
  for (int i = begin + static_cast<int>(threadIdx.x); i < end; i += kThreads) {
    const float v = logits[i];
    if (index == INT_MAX || v > value) {
      value = v;
      index = i;
    }
  }
  warp_argmax(&value, &index);
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

// prob[i] = prob_of(...) for the whole row; visible to the block on return.
__device__ inline void fill_probs(const Row& row, double* prob) {
  for (int i = static_cast<int>(threadIdx.x); i < row.vocab; i += kThreads) {
    const float logit = row.logits[i];
    prob[i] = prob_of(row, logit, rank_key(logit, i));
  }
  __syncthreads();
}

// Drops the probabilities of tokens ranked below row.lo_key (the cut of a later filter).
__device__ inline void cut_probs(const Row& row, double* prob) {
  for (int i = static_cast<int>(threadIdx.x); i < row.vocab; i += kThreads) {
    if (rank_key(row.logits[i], i) < row.lo_key) prob[i] = 0.0;
  }
  __syncthreads();
}

// One thread's share of inverse_cdf: chunk c's sum, ids from c * kCdfChunk in order (as the
// host adds them), and the last id in it with a probability > 0 into last_kept.
__device__ inline double cdf_chunk_sum(const double* prob, int c, int vocab, int* last_kept) {
  constexpr int kChunk = static_cast<int>(kCdfChunk);
  double sum = 0.0;
  const int end = min(vocab, (c + 1) * kChunk);
  // Eight loads ahead of the additions: the sum is one chain, the loads need not be.
  for (int base = c * kChunk; base < end; base += 8) {
    double p[8];
#pragma unroll
    for (int j = 0; j < 8; ++j) p[j] = base + j < end ? prob[base + j] : 0.0;
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      if (base + j >= end) break;
      if (p[j] > 0.0) *last_kept = base + j;
      sum += p[j];
    }
  }
  return sum;
}

// The rest of kernels/ref/sampling.cpp's inverse_cdf once sh.stage holds the num_chunks chunk
// sums: one thread sums them in order, and the chunk where the cumulative sum crosses u * total
// is walked by one thread. prob: the row's probabilities (read through L2: other blocks may have
// written them); last_kept: the last id with a probability > 0.
__device__ inline int draw_from_sums(int num_chunks, int last_kept, const double* prob, int vocab, double u,
                                     Shared& sh) {
  constexpr int kChunk = static_cast<int>(kCdfChunk);
  __syncthreads();  // stage is complete
  if (threadIdx.x == 0) {
    double total = 0.0;  // stage[c] becomes the sum up to and including chunk c
    for (int base = 0; base < num_chunks; base += 8) {
      double sums[8];
#pragma unroll
      for (int j = 0; j < 8; ++j) sums[j] = base + j < num_chunks ? sh.stage[base + j] : 0.0;
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        if (base + j >= num_chunks) break;
        total += sums[j];
        sh.stage[base + j] = total;
      }
    }
    sh.total = total;
  }
  __syncthreads();
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
  if (threadIdx.x < kChunk) sh.chunk_p[threadIdx.x] = i < vocab ? __ldcg(prob + i) : 0.0;
  __syncthreads();
  if (threadIdx.x == 0) {
    const double before = first == 0 ? 0.0 : sh.stage[first - 1];
    double within = 0.0;
    int drawn = -1;
    for (int base = 0; base < kChunk && drawn < 0; base += 8) {
      double p[8];
#pragma unroll
      for (int j = 0; j < 8; ++j) p[j] = sh.chunk_p[base + j];
#pragma unroll
      for (int j = 0; j < 8; ++j) {
        within += p[j];
        if (drawn < 0 && target < before + within) drawn = first * kChunk + base + j;
      }
    }
    sh.drawn = drawn < 0 ? last_kept : drawn;
  }
  __syncthreads();
  return sh.drawn;
}

// As kernels/ref/sampling.cpp's inverse_cdf, with the same additions in the same order: one
// thread sums each chunk of kCdfChunk ids, then draw_from_sums. prob: the row's prob_of values.
__device__ inline int inverse_cdf(const Row& row, const double* prob, double u, Shared& sh) {
  const int num_chunks = (row.vocab + static_cast<int>(kCdfChunk) - 1) / static_cast<int>(kCdfChunk);
  int last_kept = -1;
  for (int c = static_cast<int>(threadIdx.x); c < num_chunks; c += kThreads) {
    sh.stage[c] = cdf_chunk_sum(prob, c, row.vocab, &last_kept);
  }
  last_kept = block_max_int(last_kept, sh);
  return draw_from_sums(num_chunks, last_kept, prob, row.vocab, u, sh);
}

// top_k's kept tokens (k <= kThreads) of the row's [begin, end) ranked at least row.lo_key into
// sh.thread_best (keys) and sh.stage (probabilities), all of them when at most k; returns how many.
// A nonzero row.lo_key (a split launch's floor) usually leaves at most k: one gather. Else, when at
// most kThreads kept tokens reach top_k_floor, they are ranked by counting in shared memory; else by
// the radix select. cand_key, cand_weight: room for end - begin entries.
__device__ inline int gather_top_k(Row& row, int k, Shared& sh, u64* cand_key, u64* cand_weight) {
  if (row.lo_key != 0) {
    const int m = gather_kept(row, sh);
    if (m <= k) return m;
  }
  // top_k_floor counts only tokens ranked at least row.lo_key: its floor is 0 or at least it.
  row.lo_key = max(row.lo_key, top_k_floor(row, k, sh));
  const int m = gather_kept(row, sh);
  if (m > kThreads) {
    row.lo_key = select_lowest_kept<false>(row, static_cast<u64>(k), row.lo_key, sh, cand_key, cand_weight, nullptr);
    return gather_kept(row, sh);
  }
  if (m <= k) return m;  // every kept token ranked at least row.lo_key
  row.lo_key = kth_listed_key(m, k, sh);
  return compact_listed(m, row.lo_key, sh);
}

// One draw by one block, over the whole row. cand_key, cand_weight, prob: vocab entries each.
__device__ inline int sample_row_block(const SampleParams& p, const float* logits, int vocab, Shared& sh,
                                       u64* cand_key, u64* cand_weight, double* prob) {
  Row row;
  row.logits = logits;
  row.vocab = vocab;
  row.begin = 0;
  row.end = vocab;
  float best_value = 0.0f;
  const int best = argmax_range(logits, 0, vocab, sh, &best_value);
  if (p.temperature == 0.0 || p.top_k == 1) return best;
  row.max_logit = best_value;
  row.temperature = p.temperature;
  row.min_p = p.min_p;
  row.lo_key = 0;
  row.sure_kept = -700.0 * p.temperature;  // (delta / T) > -700 - rounding: e^-700 is normal
  const bool top_k_on = p.top_k > 0 && p.top_k < vocab;
  if (top_k_on && p.top_k <= kThreads) {
    return sample_few_kept(gather_top_k(row, p.top_k, sh, cand_key, cand_weight), p.top_p, p.u, sh);
  }
  if (top_k_on) row.lo_key = select_lowest_kept<false>(row, static_cast<u64>(p.top_k), 0, sh, cand_key, cand_weight, prob);
  fill_probs(row, prob);
  if (p.top_p < 1.0) {
    u64 units = 0;
    for (int i = static_cast<int>(threadIdx.x); i < vocab; i += kThreads) units += static_cast<u64>(prob[i] * 0x1p40);
    const u64 total = block_sum_u64(units, sh);
    // ceil(top_p * total) from the 128-bit product, as the host computes it.
    const u64 scaled = static_cast<u64>(ldexp(p.top_p, 64));
    const u64 limit = __umul64hi(scaled, total) + (scaled * total != 0 ? 1 : 0);
    row.lo_key = select_lowest_kept<true>(row, limit, 0, sh, cand_key, cand_weight, prob);
    cut_probs(row, prob);
  }
  return inverse_cdf(row, prob, p.u, sh);
}

}  // namespace deepinfer::kernels::cuda::sampling_detail
