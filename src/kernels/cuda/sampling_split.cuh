// The device sampler's split launch (kernels/cuda/sampling.cu): a row's chunks on several blocks,
// the workspace each draw's chunks share, and the per-chunk and last-block steps of top_k and of
// temperature alone (top_p alone: sampling_top_p.cuh).
#pragma once

#include <algorithm>
#include <climits>

#include "kernels/cuda/sampling_block.cuh"
#include "kernels/cuda/sampling_few.cuh"
#include "kernels/cuda/sampling_row.cuh"
#include "kernels/cuda/sampling_select.cuh"

namespace deepinfer::kernels::cuda::sampling_detail {

constexpr int kMinChunk = 1024;  // a multiple of kCdfChunk: inverse-CDF chunks never straddle two blocks
constexpr int kMaxSplitDraws = 64;
constexpr int kShortList = 256;    // draw_from_candidates ranks lists up to this long at once by counting

// The counters of a split draw: chunks finished in each kernel and candidates listed. Each call
// leaves them at zero (the last block to use one clears it), as it leaves the top_p histograms.
struct DrawCounters {
  int max_done;
  int done;
  int cut_done;
  int list_count;
};

inline size_t round_up(size_t bytes) { return (bytes + 255) / 256 * 256; }

// The workspace opens with every split draw's counters and top_p histogram, at offsets no batch
// size moves, zeroed once when the workspace is allocated; the draws' parts follow.
constexpr size_t kCountersBytes = (kMaxSplitDraws * sizeof(DrawCounters) + 255) / 256 * 256;
constexpr size_t kFixedBytes = kCountersBytes + size_t{kMaxSplitDraws} * kBins * sizeof(unsigned long long);

// Where one draw's data of a split launch lies: byte offsets from the draw's part of the workspace.
struct SplitLayout {
  int chunks = 1;
  int chunk_len = 0;
  size_t cdf = 0;         // double[vocab / kCdfChunk, rounded up]: inverse-CDF chunk sums
  size_t list_keys = 0;   // u64[vocab]: top_k candidates of every chunk
  size_t list_probs = 0;  // double[vocab]
  size_t scratch = 0;     // u64[2 * chunks * chunk_len]: each chunk's select lists; the row's probabilities
  size_t bins = 0;        // unsigned char[vocab]: each token's ratio_bin (top_p)
  size_t per_draw = 0;
};

// Chunks per draw when draws leave multiprocessors idle (1: one block per draw) and the workspace
// layout. A draw's part opens with top_p's lowest kept key, its boundary bin, the row's maximum
// and top_k's floor from the chunk maxima (bytes 0, 8, 12, 16), then per chunk its maximum, its
// index and its last kept id (from byte 24).
inline SplitLayout split_layout(int64_t vocab, int64_t num_draws, int32_t num_sms) {
  SplitLayout layout;
  // At half the multiprocessors per draw and fewer, the extra launches cost more than the split
  // saves for greedy draws.
  const int64_t per_draw = num_sms / std::max<int64_t>(num_draws, 1);
  if (per_draw < 4 || num_draws > kMaxSplitDraws) return layout;
  int64_t len = (vocab + per_draw - 1) / per_draw;
  len = std::max<int64_t>(kMinChunk, (len + kCdfChunk - 1) / kCdfChunk * kCdfChunk);
  layout.chunks = static_cast<int>((vocab + len - 1) / len);
  layout.chunk_len = static_cast<int>(len);
  if (layout.chunks < 2) return layout;
  const auto v = static_cast<size_t>(vocab);
  layout.cdf = round_up(24 + static_cast<size_t>(layout.chunks) * 12);
  layout.list_keys = layout.cdf + round_up((v + kCdfChunk - 1) / kCdfChunk * sizeof(double));
  layout.list_probs = layout.list_keys + round_up(v * sizeof(u64));
  layout.scratch = layout.list_probs + round_up(v * sizeof(double));
  layout.bins = layout.scratch + round_up(2 * static_cast<size_t>(layout.chunks) * len * sizeof(u64));
  layout.per_draw = layout.bins + round_up(v);
  return layout;
}

// One draw's part of a split launch's workspace.
struct DrawSpace {
  int* max_done;     // chunks finished in chunk_max_kernel
  int* done;         // chunks finished in split_sample_kernel
  int* cut_done;     // chunks finished in split_cut_kernel
  int* list_count;   // candidates listed
  u64* hist;         // top_p's weight per ratio bin
  u64* lo_key;       // top_p's lowest kept key
  int* boundary;     // top_p's boundary ratio bin; -1: every token is kept
  float* best_value;  // the row's maximum
  u64* k_floor;       // maxima_floor: no token ranked below it is in the row's top k
  float* max_value;
  int* max_index;
  int* last_kept;
  double* cdf;
  u64* list_keys;
  double* list_probs;
  u64* scratch;
  unsigned char* bins;
};

__device__ inline DrawSpace draw_space(unsigned char* workspace, const SplitLayout& layout, int d) {
  auto* counters = reinterpret_cast<DrawCounters*>(workspace) + d;
  unsigned char* base = workspace + kFixedBytes + static_cast<size_t>(d) * layout.per_draw;
  DrawSpace s;
  s.max_done = &counters->max_done;
  s.done = &counters->done;
  s.cut_done = &counters->cut_done;
  s.list_count = &counters->list_count;
  s.hist = reinterpret_cast<u64*>(workspace + kCountersBytes) + static_cast<size_t>(d) * kBins;
  s.lo_key = reinterpret_cast<u64*>(base);
  s.boundary = reinterpret_cast<int*>(base + 8);
  s.best_value = reinterpret_cast<float*>(base + 12);
  s.k_floor = reinterpret_cast<u64*>(base + 16);
  s.max_value = reinterpret_cast<float*>(base + 24);
  s.max_index = reinterpret_cast<int*>(s.max_value + layout.chunks);
  s.last_kept = s.max_index + layout.chunks;
  s.cdf = reinterpret_cast<double*>(base + layout.cdf);
  s.list_keys = reinterpret_cast<u64*>(base + layout.list_keys);
  s.list_probs = reinterpret_cast<double*>(base + layout.list_probs);
  s.scratch = reinterpret_cast<u64*>(base + layout.scratch);
  s.bins = base + layout.bins;
  return s;
}

// This block's chunk and draw in a split launch (grid: chunks, draws).
struct SplitBlock {
  int chunk;
  int draw;
  DrawSpace space;
  SampleParams params;
};

__device__ inline SplitBlock split_block(const SampleParams* params, unsigned char* workspace,
                                         const SplitLayout& layout) {
  SplitBlock b;
  b.chunk = static_cast<int>(blockIdx.x);
  b.draw = static_cast<int>(blockIdx.y);
  b.space = draw_space(workspace, layout, b.draw);
  b.params = params[b.draw];
  return b;
}

// The block's chunk of its draw's row, no filter applied yet (the probability fields are the
// caller's to set).
__device__ inline Row chunk_row(const float* logits, int vocab, const SplitBlock& b, const SplitLayout& layout) {
  Row row;
  row.logits = logits + static_cast<int64_t>(b.params.row) * vocab;
  row.vocab = vocab;
  row.begin = b.chunk * layout.chunk_len;
  row.end = min(vocab, row.begin + layout.chunk_len);
  row.lo_key = 0;
  return row;
}

// The filters of a split draw's rows, the same in chunk_max_kernel's floor and in split_sample_kernel.
__device__ inline void set_filters(Row& row, float max_logit, const SampleParams& p) {
  row.max_logit = max_logit;
  row.temperature = p.temperature;
  row.min_p = p.min_p;
  row.sure_kept = -700.0 * p.temperature;  // as in sample_row_block
}

// Whether split_sample_kernel lists top_k's candidates per chunk for the draw (it is sampled, and
// 1 < top_k <= kThreads, top_k < vocab).
__device__ inline bool lists_top_k(const SampleParams& p, int vocab) {
  return p.temperature != 0.0 && p.top_k > 1 && p.top_k < vocab && p.top_k <= kThreads;
}

// The row's argmax (lowest id among equal maxima) from its chunks' maxima, by warp 0.
__device__ inline int combine_maxima(const DrawSpace& s, int chunks, float* best_value) {
  if (threadIdx.x < 32) {  // lane 0's answer is warp 0's
    float value = -INFINITY;
    int index = INT_MAX;
    for (int k = static_cast<int>(threadIdx.x); k < chunks; k += 32) {
      const float v = __ldcg(s.max_value + k);
      const int i = __ldcg(s.max_index + k);
      if (index == INT_MAX || v > value) {
        value = v;
        index = i;
      }
    }
    warp_argmax(&value, &index);
    *best_value = value;
    return index;
  }
  return -1;
}

// The last block of chunk_max_kernel, a draw with lists_top_k and chunks <= kThreads: the k-th
// best rank key among the chunk maxima that are kept (is_kept under row's filters), 0 when fewer
// than k are. Those k maxima are k distinct kept tokens ranked at least it, so the row's k-th best
// kept token is too: no token ranked below it is in the row's top k. Ranked by counting.
__device__ inline u64 maxima_floor(const Row& row, const DrawSpace& s, int chunks, int k, Shared& sh) {
  const int t = static_cast<int>(threadIdx.x);
  u64 key = 0;
  if (t < chunks) {
    const float value = __ldcg(s.max_value + t);
    const u64 max_key = rank_key(value, __ldcg(s.max_index + t));
    if (is_kept(row, value, max_key)) key = max_key;
  }
  __syncthreads();  // thread_best and floor_key may hold an earlier step's data
  sh.thread_best[t] = key;
  if (t == 0) sh.floor_key = 0;
  __syncthreads();
  if (key != 0) {
    int above = 0;
    for (int j = 0; j < chunks; ++j) above += sh.thread_best[j] > key ? 1 : 0;
    if (above == k - 1) sh.floor_key = key;  // distinct keys: one thread at most
  }
  __syncthreads();
  return sh.floor_key;
}

// Whether this block is the last of its draw's chunks to finish; the others' writes are then
// visible to it (read through L2), and it clears the count for the next call.
__device__ inline bool finish_chunk(int* done, int chunks, Shared& sh) {
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) {
    sh.last_block = atomicAdd(done, 1) == chunks - 1;
    if (sh.last_block) *done = 0;
  }
  __syncthreads();
  if (sh.last_block) __threadfence();
  return sh.last_block;
}

// The chunk's own top k kept tokens ranked at least row.lo_key (maxima_floor; all of them when
// fewer) appended to the draw's list: a token of the row's top k is ranked at least the floor and
// has fewer than k kept tokens above it in its chunk too.
__device__ inline void list_chunk_candidates(Row& row, int k, const DrawSpace& s, int c, int chunk_len, Shared& sh) {
  u64* cand_key = s.scratch + 2 * static_cast<size_t>(c) * chunk_len;
  const int n = gather_top_k(row, k, sh, cand_key, cand_key + chunk_len);
  if (threadIdx.x == 0 && n > 0) sh.list_base = atomicAdd(s.list_count, n);
  __syncthreads();
  for (int j = static_cast<int>(threadIdx.x); j < n; j += kThreads) {
    s.list_keys[sh.list_base + j] = sh.thread_best[j];
    s.list_probs[sh.list_base + j] = sh.stage[j];
  }
}

// The last block: the row's top k among the listed candidates (distinct keys), then top_p and the
// draw over them. A short list (the floor leaves about k) is ranked at once by counting.
__device__ inline int draw_from_candidates(const DrawSpace& s, const SampleParams& p, Shared& sh) {
  const int n = __ldcg(s.list_count);
  __syncthreads();
  if (threadIdx.x == 0) *s.list_count = 0;  // for the next call
  const int k = p.top_k;
  if (n <= kShortList) {
    int m = gather_listed(n, s.list_keys, s.list_probs, 0, sh);
    if (m > k) m = compact_listed(m, kth_listed_key(m, k, sh), sh);
    return sample_few_kept(m, p.top_p, p.u, sh);
  }
  const u64 floor_key = kth_best_floor(0, n, k, [&](int j) -> u64 { return __ldcg(s.list_keys + j); }, sh);
  int m = gather_listed(n, s.list_keys, s.list_probs, floor_key, sh);
  if (m > kThreads) {
    const u64 lo_key = select_in_list(n, s.list_keys, nullptr, static_cast<u64>(k), floor_key, -1, 0, sh);
    m = gather_listed(n, s.list_keys, s.list_probs, lo_key, sh);
  } else if (m > k) {
    m = compact_listed(m, kth_listed_key(m, k, sh), sh);
  }
  return sample_few_kept(m, p.top_p, p.u, sh);
}

// The inverse-CDF chunk sums of the chunk's probabilities (in the draw's row of them, written by
// this block or an earlier kernel) and its last id with a probability > 0.
__device__ inline void sum_chunk_cdf(const Row& row, const DrawSpace& s, int c, Shared& sh) {
  constexpr int kChunk = static_cast<int>(kCdfChunk);
  const auto* prob = reinterpret_cast<const double*>(s.scratch);
  const int first = row.begin / kChunk;
  const int count = (row.end - row.begin + kChunk - 1) / kChunk;
  int last_kept = -1;
  for (int t = static_cast<int>(threadIdx.x); t < count; t += kThreads) {
    s.cdf[first + t] = cdf_chunk_sum(prob, first + t, row.end, &last_kept);
  }
  last_kept = block_max_int(last_kept, sh);
  if (threadIdx.x == 0) s.last_kept[c] = last_kept;
}

// Temperature (and min_p) alone: the chunk's probabilities, then its inverse-CDF chunk sums.
__device__ inline void fill_and_sum_chunk(const Row& row, const DrawSpace& s, int c, Shared& sh) {
  auto* prob = reinterpret_cast<double*>(s.scratch);
  for (int i = row.begin + static_cast<int>(threadIdx.x); i < row.end; i += kThreads) {
    const float logit = row.logits[i];
    prob[i] = prob_of(row, logit, rank_key(logit, i));
  }
  __syncthreads();
  sum_chunk_cdf(row, s, c, sh);
}

// The last block: the draw over every chunk's sums.
__device__ inline int draw_from_chunk_sums(const DrawSpace& s, int chunks, int vocab, double u, Shared& sh) {
  const int num_chunks = (vocab + static_cast<int>(kCdfChunk) - 1) / static_cast<int>(kCdfChunk);
  for (int c = static_cast<int>(threadIdx.x); c < num_chunks; c += kThreads) sh.stage[c] = __ldcg(s.cdf + c);
  int last_kept = -1;
  for (int c = static_cast<int>(threadIdx.x); c < chunks; c += kThreads) last_kept = max(last_kept, __ldcg(s.last_kept + c));
  last_kept = block_max_int(last_kept, sh);
  return draw_from_sums(num_chunks, last_kept, reinterpret_cast<const double*>(s.scratch), vocab, u, sh);
}

}  // namespace deepinfer::kernels::cuda::sampling_detail
