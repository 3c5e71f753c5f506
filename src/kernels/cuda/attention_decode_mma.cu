// Decode attention over bf16 or fp8 caches on tensor cores (mma.sync m16n8k16): a block serves one
// (split, KV head, sequence) and up to 8 query heads of that KV head; each of its warps streams its
// own 16-key steps through a cp.async ring and keeps its own online softmax, merged at the end. The
// splits of a (sequence, KV head) either write partials for the combine kernel or, as one
// thread-block cluster, combine among themselves through distributed shared memory.
// fp8 (e4m3) caches run the same steps on f16 MMAs: ldmatrix reads the codes as 16-bit pairs and one
// conversion per pair gives exact f16 operands (e4m3 is a subset of f16). A key fragment then holds
// dims 4t..4t+3 of a 16-dim chunk, so q's fragments take the same order; a value fragment holds two
// keys' codes of dims 2g and 2g + 1, split by byte permutes into an even-dim and an odd-dim tile. The
// column scales fold in outside the MMAs: K's into q, V's into the merged result.
#include <cooperative_groups.h>

#include <cmath>
#include <type_traits>

#include "core/check.h"
#include "kernels/cuda/attention_front.cuh"
#include "kernels/cuda/attention_internal.cuh"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/dependent_launch.cuh"
#include "kernels/cuda/mma_util.cuh"
#include "kernels/cuda/shared_carveout.h"

namespace deepinfer::kernels::cuda::detail {
namespace {

constexpr int kThreads = kWarps * 32;
// Keys of one warp step: the n of two score tiles, the k of one P.V product.
constexpr int kStepKeys = 16;
// Query rows a block takes. The MMA's rows 8-15 carry the low 16-bit parts of q (scores) and of p
// (P.V), so q.k and p.v keep about 16 (bf16) or 22 (f16) bits of q and p against the cache's exact
// keys and values.
constexpr int kRows = 8;
// The largest cluster tried (a non-portable size; 8 is the portable one).
constexpr int kMaxClusterSize = 16;

// Sizes for kDims dims per head of cache element T (__nv_bfloat16 or KvFp8). A stage holds the
// step's K rows then V rows, 16-byte chunk c of key k at chunk c ^ (k % kSwizzle): the 8 rows of an
// ldmatrix then hit distinct banks (two ways for fp8's 64-dim rows of 4 chunks).
template <int kDims, typename T = __nv_bfloat16>
struct MmaDecode {
  static constexpr bool kFp8 = sizeof(T) == 1;
  static constexpr int kChunks = kDims * static_cast<int>(sizeof(T)) / 16;  // 16-byte chunks of a row
  static constexpr int kSwizzle = kChunks < 8 ? kChunks : 8;
  static constexpr int kScoreSteps = kDims / 16;
  static constexpr int kValueTiles = kDims / 8;
  // Two (128 dims) to three steps in flight per warp: ~128 KB per SM against HBM's latency; fp8's
  // steps are half the bytes, so twice as many.
  static constexpr int kStages = (kDims == 64 ? 4 : 3) * (kFp8 ? 2 : 1);
  static constexpr int kStageVec = 2 * kStepKeys * kChunks;
  static constexpr int kCopies = kStepKeys * kChunks / 32;  // per lane and step, of K and of V
  static constexpr int kStateStride = kDims + 4;            // a row's acc, then m and l
  static constexpr int kStateVec = (kRows * kStateStride + 3) / 4;
  // A warp's ring, which takes the warp's final state once its copies are done.
  static constexpr int kRingVec = kStages * kStageVec > kStateVec ? kStages * kStageVec : kStateVec;
  // 256 dims: q's fragments would take 64 registers per lane (with 128 of output, they spill), so
  // they come from shared memory, rows 8-15 the low parts, rows 16 bytes apart in the banks.
  static constexpr bool kSharedQ = kDims > 128;
  static constexpr int kQStride = kDims + 8;  // bf16
  static constexpr int kQVec = kSharedQ ? 2 * kRows * kQStride * 2 / 16 : 0;
  // The warps' rings, then the block's merged state (read by the cluster's combine), then q.
  static constexpr size_t kSharedBytes = sizeof(float4) * (kWarps * kRingVec + kStateVec + kQVec);
  // With the front end folded in, after those: the rotation table (cos, then sin), the group's
  // rotated q rows and the new key's row, as floats.
  static constexpr size_t kFrontBytes = sizeof(float) * (kDims + (kRows + 1) * kDims);
  static_assert(kChunks >= 4 && kCopies * 32 == kStepKeys * kChunks, "a step is whole copies of every lane");
};

// x and y as two pairs of the MMA's 16-bit type (bf16 for bf16 caches, f16 for fp8 ones): the
// rounded values, and the rounding errors rounded again.
template <bool kF16>
__device__ __forceinline__ void split_pair(float x, float y, uint32_t& hi, uint32_t& lo) {
  if constexpr (kF16) {
    const __half2 rounded = __floats2half2_rn(x, y);
    const float2 back = __half22float2(rounded);
    hi = *reinterpret_cast<const uint32_t*>(&rounded);
    lo = pack_f16(x - back.x, y - back.y);
  } else {
    const __nv_bfloat162 rounded = __floats2bfloat162_rn(x, y);
    const float2 back = __bfloat1622float2(rounded);
    hi = *reinterpret_cast<const uint32_t*>(&rounded);
    lo = pack_bf16(x - back.x, y - back.y);
  }
}

// Softmax states (acc, then m and l at dims, dims + 1) of kCount sources at stride floats apart,
// merged in source order at element d of the row at offset row: sum, max and denominator.
template <int kCount>
__device__ __forceinline__ void merge_states(const float* states, int stride, int row, int dims, int d, float& sum,
                                             float& m_all, float& denom) {
#pragma unroll
  for (int k = 0; k < kCount; ++k) m_all = fmaxf(m_all, states[k * stride + row + dims]);
#pragma unroll
  for (int k = 0; k < kCount; ++k) {
    const float* src = states + k * stride + row;
    const float scale = m_all == -INFINITY ? 0.0f : exp2f(src[dims] - m_all);
    sum = __fmaf_rn(src[d], scale, sum);
    denom = __fmaf_rn(src[dims + 1], scale, denom);
  }
}

// The splits of one (sequence, KV head) are one cluster: each block's merged state sits in its
// shared memory, and the blocks share out the rows' elements, reading every split's state (in split
// order) through distributed shared memory.
template <int kDims>
__device__ void combine_cluster(const AttentionArgs& a, float* block_state, int32_t token, int32_t kv_head,
                                int32_t group) {
  namespace cg = cooperative_groups;
  const cg::cluster_group cluster = cg::this_cluster();
  constexpr int kStride = MmaDecode<kDims>::kStateStride;
  cluster.sync();  // every split's state is in place
  const auto num_splits = static_cast<int32_t>(cluster.num_blocks());
  const auto rank = static_cast<int32_t>(cluster.block_rank());
  for (int i = rank * kThreads + static_cast<int>(threadIdx.x); i < group * kDims; i += num_splits * kThreads) {
    const int r = i / kDims;
    const int d = i % kDims;
    // Every split's values are loaded before any is used, so the remote reads overlap.
    float m[kMaxClusterSize];
    float acc[kMaxClusterSize];
    float l[kMaxClusterSize];
#pragma unroll
    for (int s = 0; s < kMaxClusterSize; ++s) {
      if (s < num_splits) {
        const float* src = cluster.map_shared_rank(block_state, s) + r * kStride;
        m[s] = src[kDims];
        acc[s] = src[d];
        l[s] = src[kDims + 1];
      }
    }
    float m_all = -INFINITY;
#pragma unroll
    for (int s = 0; s < kMaxClusterSize; ++s) {
      if (s < num_splits) m_all = fmaxf(m_all, m[s]);
    }
    float sum = 0.0f;
    float denom = 0.0f;
#pragma unroll
    for (int s = 0; s < kMaxClusterSize; ++s) {
      if (s < num_splits) {
        const float scale = m_all == -INFINITY ? 0.0f : exp2f(m[s] - m_all);
        sum = __fmaf_rn(acc[s], scale, sum);
        denom = __fmaf_rn(l[s], scale, denom);
      }
    }
    write_decode_result(a, 0, token, kv_head * group + r, d, sum, m_all, denom);
  }
  cluster.sync();  // no block leaves while the others read its state
}

// Lane (g = lane / 4, t = lane % 4) holds query row g: the scores of keys 2t, 2t + 1 of each
// 8-key half of a step, and dims 2t, 2t + 1 of each 8-dim tile of the output. kLeanCarveout only
// names the twin that asks for the least shared-memory carveout (kernels/cuda/shared_carveout.h).
// kFront folds the attention front end in (front: its contract, for the batch's decode tokens):
// the block rotates its group's q heads itself, and the block whose keys end with the new token's
// writes that token's K and V rows into the caches before its copies read them back. A launch
// without kFront ignores front.
template <int kDims, typename T, bool kLeanCarveout = false, bool kFront = false>
__global__ void __launch_bounds__(kThreads) mma_decode_kernel(AttentionArgs a, AttentionFrontEnd front) {
  using S = MmaDecode<kDims, T>;
  constexpr int kChunks = S::kChunks;
  constexpr bool kFp8 = S::kFp8;
  extern __shared__ float4 shared_raw[];
  const int tid = static_cast<int>(threadIdx.x);
  const int warp = tid / 32;
  const int lane = tid % 32;
  // decode_block reads only the step's inputs, as does the rotation table: both precede the wait.
  const DecodeBlock block = decode_block(a);
  float* cos_table = reinterpret_cast<float*>(shared_raw + S::kSharedBytes / sizeof(float4));
  float* sin_table = cos_table + kDims / 2;
  float* q_rows = sin_table + kDims / 2;  // [kRows, kDims]
  float* new_key = q_rows + kRows * kDims;
  if constexpr (kFront) {
    if (block.decode) front_detail::fill_rope_table(front, block.token, cos_table, sin_table, tid, kThreads);
  }
  wait_for_previous_grid();
  allow_next_grid();
  if constexpr (kFront) __syncthreads();  // the rotation table is complete

  const auto [decode, seq, token, split, kv_head, group, key_begin, key_end] = block;
  if (!decode) return;
  const int g = lane / 4;
  const int t = lane % 4;
  float4* ring = shared_raw + warp * S::kRingVec;
  const int32_t num_steps = key_end > key_begin ? (key_end - key_begin + kStepKeys - 1) / kStepKeys : 0;
  const int32_t my_steps = num_steps > warp ? (num_steps - warp + kWarps - 1) / kWarps : 0;
  const PageTable pages = page_table(a, seq, kDims);
  const auto* k_head = static_cast<const T*>(a.k_cache) + static_cast<int64_t>(kv_head) * kDims;
  const auto* v_head = static_cast<const T*>(a.v_cache) + static_cast<int64_t>(kv_head) * kDims;
  // Warps take the block's steps in turn, so they stream neighbouring pages together.
  const auto step_begin = [&](int32_t n) { return key_begin + (warp + n * kWarps) * kStepKeys; };
  // Each key's row is looked up on its own, so any page size works. Every call commits a group
  // (empty past the last step), so the wait count below stays exact.
  const auto issue = [&](int32_t n) {
    if (n < my_steps) {
      float4* stage = ring + (n % S::kStages) * S::kStageVec;
      const int32_t begin = step_begin(n);
#pragma unroll
      for (int i = 0; i < S::kCopies; ++i) {
        const int idx = lane + 32 * i;
        const int key = idx / kChunks;
        const int c = idx % kChunks;
        const int32_t pos = begin + key;
        const bool valid = pos < key_end;
        const int64_t offset = c * (16 / static_cast<int>(sizeof(T))) + (valid ? pages.row_offset(pos) : 0);
        const int slot = key * kChunks + (c ^ (key % S::kSwizzle));
        cp_async16(stage + slot, k_head + offset, valid);
        cp_async16(stage + kStepKeys * kChunks + slot, v_head + offset, valid);
      }
    }
    cp_async_commit();
  };
  if constexpr (kFront) {
    // The new token is the sequence's last key; the warp whose step holds it writes its rows first.
    if (key_end == a.batch.seq_len[seq] && num_steps > 0 && warp == (num_steps - 1) % kWarps) {
      front_detail::front_end_head(front, token, false, kv_head, cos_table, sin_table, new_key, lane);
      front_detail::write_kv_row<T>(front, token, kv_head, new_key, lane);
      __threadfence();  // in L2 before the copies (which bypass L1) read the row back
      __syncwarp();
    }
  }
#pragma unroll
  for (int n = 0; n < S::kStages - 1; ++n) issue(n);

  // q of row g, pre-scaled into log2 units (and by fp8's K scales), as the A fragments of the score
  // product: rows g (the 16-bit values) and g + 8 (their rounding errors). Rows past the group are zeros.
  const float q_scale = a.params.scale * kLog2e;
  const float* k_scales = kFp8 ? a.params.cache_scales.k : nullptr;
  const auto scaled_q = [&](const float* row, int d) {
    float2 x = *reinterpret_cast<const float2*>(row + d);
    x.x *= q_scale;
    x.y *= q_scale;
    if (k_scales != nullptr) {
      x.x *= k_scales[static_cast<int64_t>(kv_head) * kDims + d];
      x.y *= k_scales[static_cast<int64_t>(kv_head) * kDims + d + 1];
    }
    return x;
  };
  if constexpr (kFront) {
    for (int r = warp; r < group; r += kWarps) {
      front_detail::front_end_head(front, token, true, kv_head * group + r, cos_table, sin_table, q_rows + r * kDims,
                                   lane);
    }
    __syncthreads();
  }
  const float* q_head =
      kFront ? q_rows : a.q + (static_cast<int64_t>(token) * a.params.num_heads + kv_head * group) * kDims;
  uint32_t q_frag[S::kSharedQ ? 1 : S::kScoreSteps][4];
  auto* q_tile = reinterpret_cast<__nv_bfloat16*>(shared_raw + kWarps * S::kRingVec + S::kStateVec);
  if constexpr (S::kSharedQ) {
    for (int i = tid; i < kRows * kDims / 2; i += kThreads) {
      const int r = i / (kDims / 2);
      const int column = i % (kDims / 2) * 2;
      const int d = column / 16 * 16 + (kFp8 ? fp8_fragment_dim(column % 16) : column % 16);
      const float2 x = r < group ? scaled_q(q_head + r * kDims, d) : make_float2(0.0f, 0.0f);
      split_pair<kFp8>(x.x, x.y, *reinterpret_cast<uint32_t*>(q_tile + r * S::kQStride + column),
                       *reinterpret_cast<uint32_t*>(q_tile + (r + kRows) * S::kQStride + column));
    }
    __syncthreads();
  } else {
#pragma unroll
    for (int kk = 0; kk < S::kScoreSteps; ++kk) {
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int d = kk * 16 + (kFp8 ? fp8_fragment_dim(half * 8 + 2 * t) : half * 8 + 2 * t);
        const float2 x = g < group ? scaled_q(q_head + g * kDims, d) : make_float2(0.0f, 0.0f);
        split_pair<kFp8>(x.x, x.y, q_frag[kk][2 * half], q_frag[kk][2 * half + 1]);
      }
    }
  }

  float o[S::kValueTiles][4];
#pragma unroll
  for (int j = 0; j < S::kValueTiles; ++j) {
#pragma unroll
    for (int i = 0; i < 4; ++i) o[j][i] = 0.0f;
  }
  float m_run = -INFINITY;
  float l_run = 0.0f;  // this lane's keys only until the end
  // ldmatrix row addresses: K as the score product's B (rows = keys, matrices: keys 0-7 / 8-15 x
  // dims 0-7 / 8-15 of a 16-dim step); V transposed as P.V's B (keys 0-7 / 8-15 x two 8-dim tiles).
  const int k_key = lane % 8 + lane / 16 * 8;
  const int k_chunk = lane / 8 % 2;
  const int v_key = lane % 8 + lane / 8 % 2 * 8;
  const int v_chunk = lane / 16;

  for (int32_t n = 0; n < my_steps; ++n) {
    cp_async_wait<S::kStages - 2>();
    __syncwarp();  // step n landed for every lane, and all are done with step n - 1's stage
    issue(n + S::kStages - 1);
    const float4* k_rows = ring + (n % S::kStages) * S::kStageVec;
    const float4* v_rows = k_rows + kStepKeys * kChunks;

    float s[2][4] = {};
    const auto q_step = [&](int kk, uint32_t(&qa)[4]) {
      if constexpr (S::kSharedQ) {
        ldmatrix_x4(qa, q_tile + lane % 16 * S::kQStride + kk * 16 + lane / 16 * 8);
      } else {
#pragma unroll
        for (int i = 0; i < 4; ++i) qa[i] = q_frag[kk][i];
      }
    };
    if constexpr (kFp8) {
      // Matrices: keys 0-7 and 8-15 of chunk kk, then of chunk kk + 1 (one 16-dim chunk each).
#pragma unroll
      for (int kk = 0; kk < S::kScoreSteps; kk += 2) {
        uint32_t b[4];
        const int c = kk + lane / 16;
        ldmatrix_x4(b, k_rows + lane % 16 * kChunks + (c ^ (lane % 16 % S::kSwizzle)));
#pragma unroll
        for (int u = 0; u < 2; ++u) {
          uint32_t qa[4];
          q_step(kk + u, qa);
          mma_f16(s[0], qa, fp8x2_to_f16x2(b[2 * u] & 0xffffu), fp8x2_to_f16x2(b[2 * u] >> 16));
          mma_f16(s[1], qa, fp8x2_to_f16x2(b[2 * u + 1] & 0xffffu), fp8x2_to_f16x2(b[2 * u + 1] >> 16));
        }
      }
    } else {
#pragma unroll
      for (int kk = 0; kk < S::kScoreSteps; ++kk) {
        uint32_t qa[4];
        q_step(kk, qa);
        uint32_t b[4];
        const int c = 2 * kk + k_chunk;
        ldmatrix_x4(b, k_rows + k_key * kChunks + (c ^ (k_key % 8)));
        mma_bf16(s[0], qa, b[0], b[1]);
        mma_bf16(s[1], qa, b[2], b[3]);
      }
    }

    // Scores of row g: the high rows' sums plus the low rows'; keys past key_end are masked.
    const int32_t begin = step_begin(n);
    float x[2][2];
    float m_step = -INFINITY;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        x[h][e] = begin + h * 8 + 2 * t + e < key_end ? s[h][e] + s[h][e + 2] : -INFINITY;
        m_step = fmaxf(m_step, x[h][e]);
      }
    }
    m_step = fmaxf(m_step, __shfl_xor_sync(0xffffffffu, m_step, 1));
    m_step = fmaxf(m_step, __shfl_xor_sync(0xffffffffu, m_step, 2));
    // The step's first key is visible, so m_step is finite. The accumulators are rescaled only
    // when the row's max moves (rarely, once it settles).
    if (m_step > m_run) {
      const float alpha = exp2f(m_run - m_step);
      l_run *= alpha;
#pragma unroll
      for (int j = 0; j < S::kValueTiles; ++j) {
#pragma unroll
        for (int i = 0; i < 4; ++i) o[j][i] *= alpha;
      }
      m_run = m_step;
    }
    // p as P.V's A fragment: row g its 16-bit values, row g + 8 their rounding errors.
    uint32_t p_frag[4];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const float p0 = exp2f(x[h][0] - m_run);
      const float p1 = exp2f(x[h][1] - m_run);
      l_run += p0 + p1;
      split_pair<kFp8>(p0, p1, p_frag[2 * h], p_frag[2 * h + 1]);
    }
    if constexpr (kFp8) {
      // Matrices: keys 0-7 and 8-15 of chunk c, then of chunk c + 1; transposed, lane (g, t) holds
      // dims 2g, 2g + 1 of keys 2t and 2t + 1. Tiles 4j..4j + 3: chunk 2j's even and odd dims, then
      // chunk 2j + 1's.
#pragma unroll
      for (int j = 0; j < S::kValueTiles / 4; ++j) {
        uint32_t b[4];
        const int c = 2 * j + lane / 16;
        ldmatrix_x4_trans(b, v_rows + lane % 16 * kChunks + (c ^ (lane % 16 % S::kSwizzle)));
#pragma unroll
        for (int u = 0; u < 2; ++u) {
#pragma unroll
          for (int parity = 0; parity < 2; ++parity) {
            const uint32_t select = parity == 0 ? 0x20u : 0x31u;  // bytes (0, 2) or (1, 3)
            mma_f16(o[4 * j + 2 * u + parity], p_frag, fp8x2_to_f16x2(__byte_perm(b[2 * u], 0, select)),
                    fp8x2_to_f16x2(__byte_perm(b[2 * u + 1], 0, select)));
          }
        }
      }
    } else {
#pragma unroll
      for (int j = 0; j < S::kValueTiles / 2; ++j) {
        uint32_t b[4];
        const int c = 2 * j + v_chunk;
        ldmatrix_x4_trans(b, v_rows + v_key * kChunks + (c ^ (v_key % 8)));
        mma_bf16(o[2 * j], p_frag, b[0], b[1]);
        mma_bf16(o[2 * j + 1], p_frag, b[2], b[3]);
      }
    }
  }
  cp_async_wait<0>();
  l_run += __shfl_xor_sync(0xffffffffu, l_run, 1);
  l_run += __shfl_xor_sync(0xffffffffu, l_run, 2);
  __syncwarp();  // the warp's ring is free: it takes the warp's state

  float* state = reinterpret_cast<float*>(ring);
#pragma unroll
  for (int j = 0; j < S::kValueTiles; ++j) {
    const float2 sum = make_float2(o[j][0] + o[j][2], o[j][1] + o[j][3]);
    if constexpr (kFp8) {
      // Tile j: chunk j / 2's dims of parity j % 2; its columns 2t, 2t + 1 are dims 4t and 4t + 2.
      const int d = j / 2 * 16 + 4 * t + j % 2;
      state[g * S::kStateStride + d] = sum.x;
      state[g * S::kStateStride + d + 2] = sum.y;
    } else {
      *reinterpret_cast<float2*>(state + g * S::kStateStride + j * 8 + 2 * t) = sum;
    }
  }
  if (t == 0) {
    state[g * S::kStateStride + kDims] = m_run;
    state[g * S::kStateStride + kDims + 1] = l_run;
  }
  __syncthreads();

  // Merge the warps in warp order, one (row, dim) per thread and step: into the output or this
  // split's partial, or into the block's state for the cluster's combine.
  const float* states = reinterpret_cast<const float*>(shared_raw);
  float* block_state = reinterpret_cast<float*>(shared_raw + kWarps * S::kRingVec);
  for (int i = tid; i < group * kDims; i += kThreads) {
    const int r = i / kDims;
    const int d = i % kDims;
    float sum = 0.0f;
    float m_all = -INFINITY;
    float denom = 0.0f;
    merge_states<kWarps>(states, S::kRingVec * 4, r * S::kStateStride, kDims, d, sum, m_all, denom);
    if (kFp8 && a.params.cache_scales.v != nullptr) {
      sum *= a.params.cache_scales.v[static_cast<int64_t>(kv_head) * kDims + d];
    }
    if (a.cluster_combine) {
      block_state[r * S::kStateStride + d] = sum;
      if (d == 0) {
        block_state[r * S::kStateStride + kDims] = m_all;
        block_state[r * S::kStateStride + kDims + 1] = denom;
      }
    } else {
      write_decode_result(a, split, token, kv_head * group + r, d, sum, m_all, denom);
    }
  }
  if (a.cluster_combine) combine_cluster<kDims>(a, block_state, token, kv_head, group);
}

template <int kDims, typename T>
void configure() {
  static const bool configured = [] {
    using S = MmaDecode<kDims, T>;
    const auto allow = [](auto kernel, size_t shared_bytes) {
      DI_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         static_cast<int>(shared_bytes)));
      DI_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
    };
    allow(mma_decode_kernel<kDims, T, false, false>, S::kSharedBytes);
    allow(mma_decode_kernel<kDims, T, true, false>, S::kSharedBytes);
    allow(mma_decode_kernel<kDims, T, false, true>, S::kSharedBytes + S::kFrontBytes);
    allow(mma_decode_kernel<kDims, T, true, true>, S::kSharedBytes + S::kFrontBytes);
    prefer_least_shared_carveout(reinterpret_cast<const void*>(mma_decode_kernel<kDims, T, true, false>),
                                 S::kSharedBytes, 1);
    prefer_least_shared_carveout(reinterpret_cast<const void*>(mma_decode_kernel<kDims, T, true, true>),
                                 S::kSharedBytes + S::kFrontBytes, 1);
    return true;
  }();
  (void)configured;
}

// The largest cluster of 16 or 8 blocks of which the GPU holds at least one at a time.
template <int kDims, typename T>
int32_t max_cluster() {
  static const int32_t size = [] {
    configure<kDims, T>();
    for (const unsigned cluster : {unsigned{kMaxClusterSize}, 8u}) {
      cudaLaunchAttribute attribute{};
      attribute.id = cudaLaunchAttributeClusterDimension;
      attribute.val.clusterDim.x = cluster;
      attribute.val.clusterDim.y = 1;
      attribute.val.clusterDim.z = 1;
      cudaLaunchConfig_t config{};
      config.gridDim = dim3(cluster);
      config.blockDim = dim3(kThreads);
      config.dynamicSmemBytes = MmaDecode<kDims, T>::kSharedBytes;
      config.attrs = &attribute;
      config.numAttrs = 1;
      int count = 0;
      if (cudaOccupancyMaxActiveClusters(&count, mma_decode_kernel<kDims, T>, &config) == cudaSuccess && count > 0) {
        return static_cast<int32_t>(cluster);
      }
      (void)cudaGetLastError();  // a size the GPU refuses leaves an error to clear
    }
    return 1;
  }();
  return size;
}

template <int kDims, typename T>
void launch(const AttentionArgs& args, const AttentionFrontEnd* front, cudaStream_t stream) {
  using S = MmaDecode<kDims, T>;
  configure<kDims, T>();
  const dim3 grid(static_cast<unsigned>(args.num_splits), static_cast<unsigned>(args.params.num_kv_heads),
                  static_cast<unsigned>(args.batch.num_seqs));
  cudaLaunchAttribute attributes[2] = {};
  attributes[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attributes[0].val.programmaticStreamSerializationAllowed = 1;
  attributes[1].id = cudaLaunchAttributeClusterDimension;
  DI_CHECK(!args.cluster_combine || args.num_splits <= kMaxClusterSize, "cluster of " << args.num_splits << " splits");
  attributes[1].val.clusterDim.x = args.cluster_combine ? static_cast<unsigned>(args.num_splits) : 1;
  attributes[1].val.clusterDim.y = 1;
  attributes[1].val.clusterDim.z = 1;
  cudaLaunchConfig_t config{};
  config.gridDim = grid;
  config.blockDim = dim3(kThreads);
  config.dynamicSmemBytes = S::kSharedBytes + (front != nullptr ? S::kFrontBytes : 0);
  config.stream = stream;
  config.attrs = attributes;
  config.numAttrs = 2;
  // A grid of at most one block per SM (batch-1 decode, between GEMVs) takes the lean twin.
  const bool lean = int64_t{grid.x} * grid.y * grid.z <= multiprocessor_count();
  const auto kernel =
      front != nullptr ? (lean ? mma_decode_kernel<kDims, T, true, true> : mma_decode_kernel<kDims, T, false, true>)
                       : (lean ? mma_decode_kernel<kDims, T, true, false> : mma_decode_kernel<kDims, T, false, false>);
  DI_CUDA_CHECK(cudaLaunchKernelEx(&config, kernel, args, front != nullptr ? *front : AttentionFrontEnd{}));
  DI_CUDA_CHECK_LAUNCH("mma_decode_kernel");
}

template <int kDims, typename T>
int32_t resident_blocks() {
  static const int32_t blocks = [] {
    configure<kDims, T>();
    int count = 0;
    DI_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&count, mma_decode_kernel<kDims, T>, kThreads,
                                                                MmaDecode<kDims, T>::kSharedBytes));
    return static_cast<int32_t>(count);
  }();
  return blocks;
}

template <typename T>
struct CacheElement {
  using type = T;
};

// f(dims, element) for the params' head size (a std::integral_constant) and cache element (a
// CacheElement).
template <typename F>
decltype(auto) for_shape(const AttentionParams& params, F&& f) {
  const bool fp8 = params.cache_dtype == DType::kF8E4M3;
  const auto with = [&](auto dims) -> decltype(auto) {
    return fp8 ? f(dims, CacheElement<KvFp8>{}) : f(dims, CacheElement<__nv_bfloat16>{});
  };
  switch (params.head_dim) {
    case 64:
      return with(std::integral_constant<int, 64>{});
    case 128:
      return with(std::integral_constant<int, 128>{});
    default:
      return with(std::integral_constant<int, 256>{});
  }
}

}  // namespace

bool mma_decode_fits(const AttentionParams& params) {
  const int32_t group = params.num_heads / params.num_kv_heads;
  return (params.cache_dtype == DType::kBF16 || params.cache_dtype == DType::kF8E4M3) && group <= kRows &&
         (params.head_dim == 64 || params.head_dim == 128 || params.head_dim == 256);
}

int32_t mma_decode_resident_blocks(const AttentionParams& params) {
  DI_CHECK(mma_decode_fits(params), "head_dim " << params.head_dim << ", heads " << params.num_heads << "/"
                                                << params.num_kv_heads);
  return for_shape(params, [](auto dims, auto element) {
    return resident_blocks<decltype(dims)::value, typename decltype(element)::type>();
  });
}

int32_t mma_decode_max_cluster(const AttentionParams& params) {
  DI_CHECK(mma_decode_fits(params), "head_dim " << params.head_dim << ", heads " << params.num_heads << "/"
                                                << params.num_kv_heads);
  return for_shape(params, [](auto dims, auto element) {
    return max_cluster<decltype(dims)::value, typename decltype(element)::type>();
  });
}

void launch_mma_decode_attention(const AttentionArgs& args, const AttentionFrontEnd* front, cudaStream_t stream) {
  DI_CHECK(mma_decode_fits(args.params), "head_dim " << args.params.head_dim << ", heads " << args.params.num_heads
                                                     << "/" << args.params.num_kv_heads);
  if (front != nullptr) {
    DI_CHECK(front->head_dim == args.params.head_dim && front->rotary_dim <= front->head_dim &&
                 front->num_heads == args.params.num_heads && front->num_kv_heads == args.params.num_kv_heads &&
                 front->cache_dtype == args.params.cache_dtype && front->k_cache == args.k_cache &&
                 front->v_cache == args.v_cache && front->cache_scales.k == args.params.cache_scales.k &&
                 front->cache_scales.v == args.params.cache_scales.v && front->num_tokens == args.batch.num_tokens &&
                 args.batch.max_query_len == 1,
             "the folded attention front end must describe this decode batch's heads and caches");
  }
  for_shape(args.params, [&](auto dims, auto element) {
    launch<decltype(dims)::value, typename decltype(element)::type>(args, front, stream);
  });
}

}  // namespace deepinfer::kernels::cuda::detail
