// sample_rows on the GPU, choosing exactly as kernels/ref/sampling.cpp does: the same rank keys
// (logit, then lower id), the same integer weights for top_k and top_p (so the kept set is found
// by a radix select over the keys instead of a sort), the same float64 cumulative sum in token-id
// order over the kept tokens for the draw, and the same exp (kernels/exp_f64.h): every
// probability has the host's bits, so every draw is the host's.
// At large batches one block samples each draw (sampling_row.cuh). When draws leave most
// multiprocessors idle, each row is split into chunks, one block each (sampling_split.cuh): a
// first kernel finds each chunk's maximum, and for top_k a floor from the kept maxima; the second,
// per chunk, lists top_k's candidates of the chunk ranked at least the floor (its own top_k: their
// union holds the row's top_k; the floor leaves a few per chunk), or sums the chunk's inverse-CDF
// chunks, or bins top_p's weight (sampling_top_p.cuh); the last block of a draw to finish merges
// them and draws, except for top_p alone, where it finds the cut and a third kernel applies it
// per chunk before its own last block draws. top_k > kThreads leaves the row to one block.
#include <algorithm>
#include <climits>
#include <cmath>

#include "core/check.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/dependent_launch.cuh"
#include "kernels/cuda/sampling.h"
#include "kernels/cuda/sampling_block.cuh"
#include "kernels/cuda/sampling_row.cuh"
#include "kernels/cuda/sampling_split.cuh"
#include "kernels/cuda/sampling_top_p.cuh"

namespace deepinfer::kernels::cuda {
namespace {

using namespace sampling_detail;

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
    const int token = sample_row_block(p, logits + static_cast<int64_t>(p.row) * vocab, vocab, sh, cand_key,
                                       cand_weight, prob);
    if (threadIdx.x == 0) token_ids[d] = token;
    __syncthreads();  // the shared state is the next draw's
  }
}

// Grid (chunks, draws): each chunk's maximum; the draw's last block combines them into the row's,
// takes it as the token of a greedy draw, and for a draw with lists_top_k finds maxima_floor.
__global__ void __launch_bounds__(kThreads) chunk_max_kernel(const float* logits, int vocab,
                                                              const SampleParams* params, int32_t* token_ids,
                                                              unsigned char* workspace, SplitLayout layout) {
  wait_for_previous_grid();
  allow_next_grid();
  __shared__ Shared sh;
  const SplitBlock b = split_block(params, workspace, layout);
  const DrawSpace& s = b.space;
  const Row row = chunk_row(logits, vocab, b, layout);
  float value = 0.0f;
  const int index = argmax_range(row.logits, row.begin, row.end, sh, &value);
  if (threadIdx.x == 0) {
    s.max_value[b.chunk] = value;
    s.max_index[b.chunk] = index;
  }
  if (!finish_chunk(s.max_done, layout.chunks, sh)) return;
  const int best = combine_maxima(s, layout.chunks, &value);
  if (threadIdx.x == 0) {
    *s.best_value = value;
    sh.best_value = value;
    if (b.params.temperature == 0.0 || b.params.top_k == 1) token_ids[b.draw] = best;
  }
  u64 k_floor = 0;
  if (lists_top_k(b.params, vocab) && layout.chunks >= b.params.top_k && layout.chunks <= kThreads) {
    __syncthreads();  // sh.best_value is set
    Row filters = row;
    set_filters(filters, sh.best_value, b.params);
    k_floor = maxima_floor(filters, s, layout.chunks, b.params.top_k, sh);
  }
  if (threadIdx.x == 0) *s.k_floor = k_floor;
}

// Grid (chunks, draws), after chunk_max_kernel, which drew the greedy draws. top_k <= kThreads,
// top_p alone (drawn by split_cut_kernel) and temperature-only (min_p allowed) draws are split;
// top_k > kThreads runs on chunk 0's block.
__global__ void __launch_bounds__(kThreads) split_sample_kernel(const float* logits, int vocab,
                                                                 const SampleParams* params, int32_t* token_ids,
                                                                 unsigned char* workspace, SplitLayout layout) {
  wait_for_previous_grid();
  allow_next_grid();
  __shared__ Shared sh;
  const SplitBlock b = split_block(params, workspace, layout);
  const DrawSpace& s = b.space;
  const SampleParams& p = b.params;
  const int c = b.chunk;
  const int d = b.draw;
  if (p.temperature == 0.0 || p.top_k == 1) return;  // chunk_max_kernel drew it
  Row row = chunk_row(logits, vocab, b, layout);
  const bool top_k_on = p.top_k > 0 && p.top_k < vocab;
  const bool few = top_k_on && p.top_k <= kThreads;
  if (top_k_on && !few) {
    if (c != 0) return;
    const int token = sample_row_block(p, row.logits, vocab, sh, s.list_keys, reinterpret_cast<u64*>(s.list_probs),
                                       reinterpret_cast<double*>(s.scratch));
    if (threadIdx.x == 0) token_ids[d] = token;
    return;
  }
  set_filters(row, *s.best_value, p);
  const bool top_p_on = !few && p.top_p < 1.0;
  if (few) {
    row.lo_key = *s.k_floor;  // 0 here lists every chunk's whole top k: also correct, ~100x longer at b=1
    list_chunk_candidates(row, p.top_k, s, c, layout.chunk_len, sh);
  } else if (top_p_on) {
    bin_chunk_mass(row, s, sh);
  } else {
    fill_and_sum_chunk(row, s, c, sh);
  }
  if (!finish_chunk(s.done, layout.chunks, sh)) return;
  int token = 0;
  if (few) {
    token = draw_from_candidates(s, p, sh);
  } else if (top_p_on) {
    find_top_p_cut(row, s, p, sh);
    return;  // split_cut_kernel draws
  } else {
    token = draw_from_chunk_sums(s, layout.chunks, vocab, p.u, sh);
  }
  if (threadIdx.x == 0) token_ids[d] = token;
}

// Grid (chunks, draws), after split_sample_kernel: top_p alone's cut, inverse-CDF sums and draw;
// other draws are done.
__global__ void __launch_bounds__(kThreads) split_cut_kernel(const float* logits, int vocab,
                                                              const SampleParams* params, int32_t* token_ids,
                                                              unsigned char* workspace, SplitLayout layout) {
  wait_for_previous_grid();
  allow_next_grid();
  __shared__ Shared sh;
  const SplitBlock b = split_block(params, workspace, layout);
  const SampleParams& p = b.params;
  const bool top_k_on = p.top_k > 0 && p.top_k < vocab;
  if (p.temperature == 0.0 || p.top_k == 1 || top_k_on || !(p.top_p < 1.0)) return;
  cut_and_sum_chunk(chunk_row(logits, vocab, b, layout), b.space, b.chunk, sh);
  if (!finish_chunk(b.space.cut_done, layout.chunks, sh)) return;
  const int token = draw_from_chunk_sums(b.space, layout.chunks, vocab, p.u, sh);
  if (threadIdx.x == 0) token_ids[b.draw] = token;
}

int32_t num_blocks(int64_t num_draws, int32_t num_sms) {
  return static_cast<int32_t>(std::max<int64_t>(1, std::min<int64_t>(num_draws, std::max(num_sms, 1))));
}

}  // namespace

size_t sample_rows_workspace_bytes(int64_t vocab, int64_t num_draws, int32_t num_sms) {
  const size_t one_per_row = static_cast<size_t>(num_blocks(num_draws, num_sms)) * 3 * static_cast<size_t>(vocab) *
                             sizeof(u64);
  return kFixedBytes +
         std::max(one_per_row, static_cast<size_t>(num_draws) * split_layout(vocab, num_draws, num_sms).per_draw);
}

void clear_sample_rows_workspace(void* workspace, cudaStream_t stream) {
  DI_CUDA_CHECK(cudaMemsetAsync(workspace, 0, kFixedBytes, stream));
}

void sample_rows(const float* logits, int64_t vocab, const SampleParams* params, int64_t num_draws,
                 int32_t* token_ids, void* workspace, int32_t num_sms, cudaStream_t stream) {
  if (num_draws == 0) return;
  DI_CHECK(vocab <= int64_t{kStage} * kCdfChunk, "vocabulary of " << vocab << " tokens");
  const SplitLayout layout = split_layout(vocab, num_draws, num_sms);
  if (layout.chunks < 2) {
    launch_dependent(sample_rows_kernel, dim3(static_cast<unsigned>(num_blocks(num_draws, num_sms))), dim3(kThreads),
                     0, stream, logits, static_cast<int>(vocab), params, static_cast<int>(num_draws), token_ids,
                     reinterpret_cast<u64*>(static_cast<unsigned char*>(workspace) + kFixedBytes));
    DI_CUDA_CHECK_LAUNCH("sample_rows_kernel");
    return;
  }
  const dim3 grid(static_cast<unsigned>(layout.chunks), static_cast<unsigned>(num_draws));
  auto* bytes = static_cast<unsigned char*>(workspace);
  launch_dependent(chunk_max_kernel, grid, dim3(kThreads), 0, stream, logits, static_cast<int>(vocab), params,
                   token_ids, bytes, layout);
  DI_CUDA_CHECK_LAUNCH("chunk_max_kernel");
  launch_dependent(split_sample_kernel, grid, dim3(kThreads), 0, stream, logits, static_cast<int>(vocab), params,
                   token_ids, bytes, layout);
  DI_CUDA_CHECK_LAUNCH("split_sample_kernel");
  launch_dependent(split_cut_kernel, grid, dim3(kThreads), 0, stream, logits, static_cast<int>(vocab), params,
                   token_ids, bytes, layout);
  DI_CUDA_CHECK_LAUNCH("split_cut_kernel");
}

}  // namespace deepinfer::kernels::cuda
