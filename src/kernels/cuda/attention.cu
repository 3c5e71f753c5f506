// Paged causal GQA attention (sliding window, sinks and lookahead optional), the general kernel for prefill
// and for decodes the decode kernel (attention_decode.cu) does not take: a block takes up to
// kWarps * kRowsPerWarp query rows (token, head) of one sequence that share one KV head, streams
// that head's keys of one split through shared memory in tiles of 32 (K and V read once for all
// the group's heads; once in all when they are the same cache, as in MLA), and keeps an online
// softmax per row. Head sizes up to 256, and MLA's 576 (512 + 64 latent rows), on float32, bf16 or
// fp8 caches (widened to float32 in shared memory, an fp8 code times its column's scale). Splits over the key axis
// (flash-decoding) give long decodes enough blocks; a second kernel combines them in split order.
#include <algorithm>
#include <cmath>

#include "core/check.h"

#include "kernels/cuda/attention_internal.cuh"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/dependent_launch.cuh"
#include "kernels/cuda/device_util.cuh"

namespace deepinfer::kernels::cuda {
namespace {

using detail::AttentionArgs;
using detail::kLog2e;
using detail::kWarps;
using detail::partial_row;

constexpr int kTileKeys = 32;
// Head sizes above 256 (MLA's latent rows, 512 + 64) take one instantiation of 576 dims with 4
// rows per warp: more would not fit the registers.
constexpr int kWideDims = 576;

// kDims = head_dim rounded up to a multiple of 32 (lane l owns dims l, l + 32, ...); T: the cache
// element, float, __nv_bfloat16 or KvFp8.
template <typename T, int kDims, int kRowsPerWarp>
__global__ void __launch_bounds__(kWarps * 32) paged_attention_kernel(AttentionArgs a) {
  wait_for_previous_grid();
  allow_next_grid();
  constexpr int kRows = kWarps * kRowsPerWarp;
  constexpr int kPerLane = kDims / 32;
  constexpr int kKStride = kDims + 4;  // 16-byte padding: lane j's float4 reads of row j miss each other's banks
  // Up to 256 dims a tile goes through registers (16-byte loads all issued before any is used);
  // wider tiles would need too many, so they go global -> shared by cp.async.
  constexpr bool kStaged = kDims <= 256;
  extern __shared__ float4 shared_raw[];
  const bool shared_kv = a.k_cache == a.v_cache;  // MLA: one latent row is both key and value
  const T* k_cache = static_cast<const T*>(a.k_cache);
  const T* v_cache = static_cast<const T*>(a.v_cache);
  const float* k_scales = a.params.cache_scales.k;
  const float* v_scales = a.params.cache_scales.v;
  float* q_tile = reinterpret_cast<float*>(shared_raw);           // [kRows, kDims], pre-scaled
  float* k_tile = q_tile + kRows * kDims;                           // [kTileKeys, kKStride]
  float* v_tile = shared_kv ? k_tile : k_tile + kTileKeys * kKStride;  // [kTileKeys, kKStride]

  // Row tiles of one split are neighbours in the grid, so they run together and the tiles after
  // the first find the split's keys in L2 (MLA with 128 heads: 8 tiles on one latent head).
  const auto row_tiles = static_cast<int32_t>(gridDim.x) / a.num_splits;
  const int32_t split = static_cast<int32_t>(blockIdx.x) / row_tiles;
  const int32_t tile = static_cast<int32_t>(blockIdx.x) % row_tiles;
  const int32_t kv_head = static_cast<int32_t>(blockIdx.y);
  const int32_t seq = static_cast<int32_t>(blockIdx.z);
  const int32_t head_dim = a.params.head_dim;
  const int32_t group = a.params.num_heads / a.params.num_kv_heads;
  const int32_t window = a.params.sliding_window;
  const int32_t q_begin = a.batch.query_start[seq];
  const int32_t num_new = a.batch.query_start[seq + 1] - q_begin;
  if (a.skip_single_token && num_new == 1) return;
  const int32_t seq_len = a.batch.seq_len[seq];
  const int32_t num_rows = num_new * group;
  const int32_t row0 = tile * kRows;
  if (row0 >= num_rows) return;
  const int32_t last_row = min(row0 + kRows, num_rows) - 1;
  const int32_t first_pos = seq_len - num_new + row0 / group;
  const int32_t last_pos = seq_len - num_new + last_row / group;

  // With lookahead (image tokens seeing their whole image) a row may see keys past the last row's
  // position: the tile's rows agree on the last key any of them sees.
  int32_t tile_last_key = last_pos;
  if (a.batch.lookahead != nullptr) {
    __shared__ int32_t shared_last_key;
    if (threadIdx.x == 0) shared_last_key = last_pos;
    __syncthreads();
    if (threadIdx.x < kRows && row0 + static_cast<int32_t>(threadIdx.x) <= last_row) {
      const int32_t row = row0 + static_cast<int32_t>(threadIdx.x);
      atomicMax(&shared_last_key, seq_len - num_new + row / group + a.batch.lookahead[q_begin + row / group]);
    }
    __syncthreads();
    tile_last_key = shared_last_key;
  }
  // Keys of this split that any row here can see, starting on a 32-key boundary of the split.
  const int32_t split_begin = split * a.split_keys;
  const int32_t key_end = min(min(split_begin + a.split_keys, seq_len), tile_last_key + 1);
  int32_t key_begin = split_begin;
  if (window > 0 && first_pos - window + 1 > key_begin) {
    key_begin += (first_pos - window + 1 - split_begin) / kTileKeys * kTileKeys;
  }

  const int warp = static_cast<int>(threadIdx.x / 32);
  const int lane = static_cast<int>(threadIdx.x % 32);
  const float q_scale = a.params.scale * kLog2e;
  for (int i = static_cast<int>(threadIdx.x); i < kRows * kDims; i += kWarps * 32) {
    const int r = i / kDims;
    const int d = i % kDims;
    const int32_t row = row0 + r;
    float value = 0.0f;
    if (row < num_rows && d < head_dim) {
      const int64_t token = q_begin + row / group;
      const int32_t head = kv_head * group + row % group;
      value = a.q[(token * a.params.num_heads + head) * head_dim + d] * q_scale;
    }
    q_tile[i] = value;
  }

  int32_t pos[kRowsPerWarp];
  int32_t last_key[kRowsPerWarp];  // the last key each row sees: its own position plus its lookahead
  float m[kRowsPerWarp];
  float l[kRowsPerWarp];
  float acc[kRowsPerWarp][kPerLane];
#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r) {
    const int32_t row = row0 + warp * kRowsPerWarp + r;
    pos[r] = row < num_rows ? seq_len - num_new + row / group : -1;  // -1: no row, every key masked
    last_key[r] = pos[r];
    if (row < num_rows && a.batch.lookahead != nullptr) last_key[r] += a.batch.lookahead[q_begin + row / group];
    m[r] = -INFINITY;
    l[r] = 0.0f;
#pragma unroll
    for (int c = 0; c < kPerLane; ++c) acc[r][c] = 0.0f;
  }

  const int64_t cache_row = static_cast<int64_t>(a.params.num_kv_heads) * head_dim;
  const int32_t* blocks = a.batch.block_table + static_cast<int64_t>(seq) * a.batch.max_blocks_per_seq;
  const int32_t block_size = a.batch.block_size;
  // Fast path (head_dim == kDims): 16-byte loads into registers, all issued before any is used.
  // Decode blocks (one row per warp, registers to spare) load the next tile while the warps work on
  // the current one; prefill blocks keep their registers for the rows.
  const bool fast = head_dim == kDims;
  constexpr bool kPrefetch = kStaged && kRowsPerWarp == 1;
  constexpr int kLoads = kStaged ? kTileKeys * kDims / 4 / (kWarps * 32) : 1;
  float4 staged_k[kLoads];
  float4 staged_v[kLoads];
  const auto key_offset = [&](int32_t p) {
    return (static_cast<int64_t>(blocks[p / block_size]) * block_size + p % block_size) * cache_row +
           static_cast<int64_t>(kv_head) * head_dim;
  };
  const auto load_tile = [&](int32_t begin) {
#pragma unroll
    for (int j = 0; j < kLoads; ++j) {
      const int i = static_cast<int>(threadIdx.x) + j * kWarps * 32;
      const int32_t p = begin + i / (kDims / 4);
      staged_k[j] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      staged_v[j] = staged_k[j];
      if (p < key_end) {
        const int64_t column = static_cast<int64_t>(kv_head) * head_dim + i % (kDims / 4) * 4;
        const int64_t offset = key_offset(p) + i % (kDims / 4) * 4;
        staged_k[j] = load_kv4(k_cache, offset, k_scales, column);
        if (!shared_kv) staged_v[j] = load_kv4(v_cache, offset, v_scales, column);
      }
    }
  };
  if (kPrefetch && fast && key_begin < key_end) load_tile(key_begin);
  for (int32_t tile_begin = key_begin; tile_begin < key_end; tile_begin += kTileKeys) {
    __syncthreads();  // the previous tile's readers are done (and q_tile is written, first time)
    if (fast && kStaged) {
      if constexpr (!kPrefetch) load_tile(tile_begin);
#pragma unroll
      for (int j = 0; j < kLoads; ++j) {
        const int i = static_cast<int>(threadIdx.x) + j * kWarps * 32;
        const int at = i / (kDims / 4) * kKStride + i % (kDims / 4) * 4;
        *reinterpret_cast<float4*>(k_tile + at) = staged_k[j];
        if (!shared_kv) *reinterpret_cast<float4*>(v_tile + at) = staged_v[j];
      }
      if (kPrefetch && tile_begin + kTileKeys < key_end) load_tile(tile_begin + kTileKeys);
    } else if (fast && sizeof(T) == sizeof(float)) {
      // Keys past key_end read as zeros (their scores are masked; zero values keep 0 * v finite).
      for (int i = static_cast<int>(threadIdx.x); i < kTileKeys * kDims / 4; i += kWarps * 32) {
        const int32_t p = tile_begin + i / (kDims / 4);
        const bool valid = p < key_end;
        const int64_t offset = (valid ? key_offset(p) : 0) + i % (kDims / 4) * 4;
        const int at = i / (kDims / 4) * kKStride + i % (kDims / 4) * 4;
        detail::cp_async16(k_tile + at, k_cache + offset, valid);
        if (!shared_kv) detail::cp_async16(v_tile + at, v_cache + offset, valid);
      }
      detail::cp_async_commit();
      detail::cp_async_wait<0>();
    } else if (fast) {
      // Wide bf16 or fp8 rows (MLA's latent cache at prefill): 16-byte loads widened into the float tile.
      constexpr int kElems = 16 / static_cast<int>(sizeof(T));
      constexpr int kChunks = kDims / kElems;
      for (int i = static_cast<int>(threadIdx.x); i < kTileKeys * kChunks; i += kWarps * 32) {
        const int32_t p = tile_begin + i / kChunks;
        const int at = i / kChunks * kKStride + i % kChunks * kElems;
        float kx[kElems] = {};
        float vx[kElems] = {};
        if (p < key_end) {
          const int64_t column = static_cast<int64_t>(kv_head) * head_dim + i % kChunks * kElems;
          const int64_t offset = key_offset(p) + i % kChunks * kElems;
          unpack16(*reinterpret_cast<const float4*>(k_cache + offset), k_cache, kx);
          scale_kv<kElems>(kx, k_scales, column);
          if (!shared_kv) {
            unpack16(*reinterpret_cast<const float4*>(v_cache + offset), v_cache, vx);
            scale_kv<kElems>(vx, v_scales, column);
          }
        }
#pragma unroll
        for (int e = 0; e < kElems; e += 4) {
          *reinterpret_cast<float4*>(k_tile + at + e) = make_float4(kx[e], kx[e + 1], kx[e + 2], kx[e + 3]);
          if (!shared_kv) {
            *reinterpret_cast<float4*>(v_tile + at + e) = make_float4(vx[e], vx[e + 1], vx[e + 2], vx[e + 3]);
          }
        }
      }
    } else {
      for (int i = static_cast<int>(threadIdx.x); i < kTileKeys * kDims; i += kWarps * 32) {
        const int key = i / kDims;
        const int d = i % kDims;
        const int32_t p = tile_begin + key;
        float kx = 0.0f;
        float vx = 0.0f;
        if (p < key_end && d < head_dim) {
          const int64_t column = static_cast<int64_t>(kv_head) * head_dim + d;
          const int64_t offset = key_offset(p) + d;
          kx = load_kv(k_cache, offset, k_scales, column);
          vx = load_kv(v_cache, offset, v_scales, column);
        }
        k_tile[key * kKStride + d] = kx;
        if (!shared_kv) v_tile[key * kKStride + d] = vx;
      }
    }
    __syncthreads();

    // Lane j scores key tile_begin + j against each of the warp's rows.
    float score[kRowsPerWarp];
#pragma unroll
    for (int r = 0; r < kRowsPerWarp; ++r) score[r] = 0.0f;
    const float* k_row = k_tile + lane * kKStride;
    const float* q_rows = q_tile + warp * kRowsPerWarp * kDims;
#pragma unroll 4
    for (int d = 0; d < kDims; d += 4) {
      const float4 kx = *reinterpret_cast<const float4*>(k_row + d);
#pragma unroll
      for (int r = 0; r < kRowsPerWarp; ++r) {
        const float4 qx = *reinterpret_cast<const float4*>(q_rows + r * kDims + d);
        // Explicit FMAs: the same rounding in every instantiation (batch invariance).
        score[r] = __fmaf_rn(qx.w, kx.w, __fmaf_rn(qx.z, kx.z, __fmaf_rn(qx.y, kx.y, __fmaf_rn(qx.x, kx.x, score[r]))));
      }
    }
    const int32_t key = tile_begin + lane;
#pragma unroll
    for (int r = 0; r < kRowsPerWarp; ++r) {
      const bool visible = key < key_end && key <= last_key[r] && (window == 0 || pos[r] - key < window);
      const float s = visible ? score[r] : -INFINITY;
      const float m_new = fmaxf(m[r], warp_max(s));
      // A row that has seen no key yet keeps m = -inf; exp2 of (-inf) - (-inf) would be NaN.
      const float p = m_new == -INFINITY ? 0.0f : exp2f(s - m_new);
      const float alpha = m_new == -INFINITY ? 1.0f : exp2f(m[r] - m_new);
      l[r] = __fmaf_rn(l[r], alpha, warp_sum(p));
      m[r] = m_new;
#pragma unroll
      for (int c = 0; c < kPerLane; ++c) acc[r][c] *= alpha;
      score[r] = p;
    }
#pragma unroll 8
    for (int j = 0; j < kTileKeys; ++j) {
      float v[kPerLane];
#pragma unroll
      for (int c = 0; c < kPerLane; ++c) v[c] = v_tile[j * kKStride + lane + 32 * c];
#pragma unroll
      for (int r = 0; r < kRowsPerWarp; ++r) {
        const float p = __shfl_sync(0xffffffffu, score[r], j);
#pragma unroll
        for (int c = 0; c < kPerLane; ++c) acc[r][c] = __fmaf_rn(p, v[c], acc[r][c]);
      }
    }
  }

#pragma unroll
  for (int r = 0; r < kRowsPerWarp; ++r) {
    const int32_t row = row0 + warp * kRowsPerWarp + r;
    if (row >= num_rows) continue;
    const int64_t token = q_begin + row / group;
    const int32_t head = kv_head * group + row % group;
    if (a.write_partials) {
      float* dst = partial_row(a, split, token, head);
#pragma unroll
      for (int c = 0; c < kPerLane; ++c) {
        if (lane + 32 * c < head_dim) dst[lane + 32 * c] = acc[r][c];
      }
      if (lane == 0) {
        dst[head_dim] = m[r];
        dst[head_dim + 1] = l[r];
      }
    } else {
      float denom = l[r];
      float rescale = 1.0f;
      if (a.params.sinks != nullptr) {
        const float sink = a.params.sinks[head] * kLog2e;
        const float m_all = fmaxf(m[r], sink);
        rescale = exp2f(m[r] - m_all);
        denom = l[r] * rescale + exp2f(sink - m_all);
      }
      float* dst = a.out + (token * a.params.num_heads + head) * head_dim;
#pragma unroll
      for (int c = 0; c < kPerLane; ++c) {
        if (lane + 32 * c < head_dim) dst[lane + 32 * c] = acc[r][c] * rescale / denom;
      }
    }
  }
}

// One warp per (token, head, 32 dims): combines the splits' partial softmaxes in split order. Each
// chunk of 32 splits has its weights computed once (lane j: split j) and broadcast, so the lane's
// loads of the chunk's partials are independent and many are in flight (short contexts cut into
// many splits are bound by this kernel's latency otherwise). Empty trailing splits (m = -inf,
// l = 0, acc = 0) add exact zeros, so a wider block table does not change the bits.
__global__ void combine_splits_kernel(AttentionArgs a) {
  wait_for_previous_grid();
  allow_next_grid();
  const int32_t head_dim = a.params.head_dim;
  const int32_t slices = (head_dim + 31) / 32;
  const int64_t index = blockIdx.x * int64_t{kWarps} + threadIdx.x / 32;
  const int lane = static_cast<int>(threadIdx.x % 32);
  const int64_t num_rows = static_cast<int64_t>(a.batch.num_tokens) * a.params.num_heads;
  if (index >= num_rows * slices) return;
  const int64_t row = index / slices;
  const int32_t d = static_cast<int32_t>(index % slices) * 32 + lane;
  const int64_t token = row / a.params.num_heads;
  const int32_t head = static_cast<int32_t>(row % a.params.num_heads);
  float m_all = -INFINITY;
  for (int32_t s = lane; s < a.num_splits; s += 32) m_all = fmaxf(m_all, partial_row(a, s, token, head)[head_dim]);
  m_all = warp_max(m_all);
  float sink = -INFINITY;
  if (a.params.sinks != nullptr) {
    sink = a.params.sinks[head] * kLog2e;
    m_all = fmaxf(m_all, sink);
  }
  float denom = a.params.sinks != nullptr ? exp2f(sink - m_all) : 0.0f;
  float sum = 0.0f;
  for (int32_t base = 0; base < a.num_splits; base += 32) {
    const int32_t count = min(32, a.num_splits - base);
    float weight = 0.0f;
    float l = 0.0f;
    if (lane < count) {
      const float* src = partial_row(a, base + lane, token, head);
      weight = exp2f(src[head_dim] - m_all);
      l = src[head_dim + 1];
    }
#pragma unroll 8
    for (int32_t j = 0; j < count; ++j) {
      const float w = __shfl_sync(0xffffffffu, weight, j);
      denom = __fmaf_rn(__shfl_sync(0xffffffffu, l, j), w, denom);
      if (d < head_dim) sum = __fmaf_rn(partial_row(a, base + j, token, head)[d], w, sum);
    }
  }
  if (d < head_dim) a.out[(token * a.params.num_heads + head) * head_dim + d] = sum / denom;
}

template <typename T, int kDims, int kRowsPerWarp>
void launch(const AttentionArgs& args, unsigned row_tiles, cudaStream_t stream) {
  constexpr int kRows = kWarps * kRowsPerWarp;
  constexpr size_t kTileBytes = kTileKeys * (kDims + 4) * sizeof(float);
  constexpr size_t kSharedBytes = kRows * kDims * sizeof(float) + 2 * kTileBytes;
  static const bool configured = [] {
    DI_CUDA_CHECK(cudaFuncSetAttribute(paged_attention_kernel<T, kDims, kRowsPerWarp>,
                                       cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(kSharedBytes)));
    return true;
  }();
  (void)configured;
  const dim3 grid(row_tiles * static_cast<unsigned>(args.num_splits), static_cast<unsigned>(args.params.num_kv_heads),
                  static_cast<unsigned>(args.batch.num_seqs));
  // Shared keys and values (MLA) need one tile, not two.
  const size_t shared_bytes = args.k_cache == args.v_cache ? kSharedBytes - kTileBytes : kSharedBytes;
  launch_dependent(paged_attention_kernel<T, kDims, kRowsPerWarp>, grid, dim3(kWarps * 32), shared_bytes, stream, args);
  DI_CUDA_CHECK_LAUNCH("paged_attention_kernel");
}

template <typename T, int kRowsPerWarp>
void launch_for_dims(const AttentionArgs& args, unsigned row_tiles, cudaStream_t stream) {
  const int32_t head_dim = args.params.head_dim;
  if (head_dim <= 32) return launch<T, 32, kRowsPerWarp>(args, row_tiles, stream);
  if (head_dim <= 64) return launch<T, 64, kRowsPerWarp>(args, row_tiles, stream);
  if (head_dim <= 128) return launch<T, 128, kRowsPerWarp>(args, row_tiles, stream);
  return launch<T, 256, kRowsPerWarp>(args, row_tiles, stream);
}

// Wide heads (MLA's latent rows) take rows_per_warp 4.
template <typename T>
void launch_general(const AttentionArgs& args, int32_t rows_per_warp, unsigned row_tiles, cudaStream_t stream) {
  if (rows_per_warp == 4) {
    launch<T, kWideDims, 4>(args, row_tiles, stream);
  } else if (rows_per_warp == 8) {
    launch_for_dims<T, 8>(args, row_tiles, stream);
  } else {
    launch_for_dims<T, 1>(args, row_tiles, stream);
  }
}

// Decode-like batches (a few rows per KV head) give each warp one row; prefill gives it eight so a
// key tile in shared memory serves 32 rows. Wide heads always take four.
int32_t rows_per_warp(const PagedBatch& batch, const AttentionParams& params) {
  if (params.head_dim > 256) return 4;
  const int32_t group = params.num_heads / params.num_kv_heads;
  return batch.max_query_len * group > kWarps * 2 ? 8 : 1;
}

// Whether the general kernel has rows to serve: with the decode kernel on, only sequences with
// more than one new token are left to it.
bool general_kernel_needed(const PagedBatch& batch, const AttentionParams& params) {
  return batch.max_query_len > 1 || !detail::decode_kernel_fits(params);
}

}  // namespace

AttentionPlan plan_paged_attention(const PagedBatch& batch, const AttentionParams& params, int32_t fixed_split_keys,
                                   int32_t num_sms) {
  DI_CHECK(params.num_kv_heads > 0 && params.num_heads % params.num_kv_heads == 0,
           "num_heads " << params.num_heads << ", num_kv_heads " << params.num_kv_heads);
  DI_CHECK(params.head_dim > 0 && params.head_dim <= kWideDims,
           "head_dim " << params.head_dim << " (CUDA takes <= " << kWideDims << ")");
  DI_CHECK(batch.num_tokens > 0 && batch.max_query_len > 0, "PagedBatch needs its host-side sizes");
  const int64_t max_keys = std::max<int64_t>(int64_t{batch.max_blocks_per_seq} * batch.block_size, 1);
  // Batch-invariant mode always combines through the workspace, so one split and many give the
  // same arithmetic. Otherwise the tensor-core decode kernel's splits of one (sequence, KV head)
  // may run as one cluster and combine without a second kernel.
  const bool mma_decode =
      fixed_split_keys == 0 && !general_kernel_needed(batch, params) && detail::mma_decode_fits(params);
  const bool mla_decode =
      fixed_split_keys == 0 && !general_kernel_needed(batch, params) && detail::mla_decode_fits(params);
  const int64_t max_cluster = mma_decode ? detail::mma_decode_max_cluster(params) : 1;
  AttentionPlan plan;
  if (fixed_split_keys > 0) {
    plan.split_keys = fixed_split_keys;
  } else {
    // The decode kernel's blocks each serve a whole KV group; it wants more, shorter splits (a few
    // waves) so the last wave's tail is short.
    const bool decode_only = !general_kernel_needed(batch, params);
    const int32_t group = params.num_heads / params.num_kv_heads;
    const int64_t rows = int64_t{kWarps} * rows_per_warp(batch, params);
    const int64_t row_tiles = decode_only ? 1 : (int64_t{batch.max_query_len} * group + rows - 1) / rows;
    // The MLA decode kernel's blocks each take 16 of the latent head's query heads.
    const int64_t head_blocks = mla_decode ? detail::mla_decode_head_blocks(params) : 1;
    const int64_t base_blocks = row_tiles * params.num_kv_heads * head_blocks * batch.num_seqs;
    // The tensor-core decode kernels (bf16 and fp8 caches).
    const bool mma_kernel_decode = decode_only && params.cache_dtype != DType::kF32;
    int64_t wanted = 1;
    if (mma_kernel_decode) {
      // Whole waves: the fewest waves of resident blocks that at least 85 % fill, so no short tail
      // wave keeps a few SMs busy while the rest idle.
      const int64_t slots = int64_t{detail::decode_resident_blocks(params)} * num_sms;
      for (int64_t waves = 1; waves <= 4; ++waves) {
        const int64_t splits = waves * slots / base_blocks;
        if (splits >= 1 && splits * base_blocks * 100 >= waves * slots * 85) {
          wanted = splits;
          break;
        }
      }
    } else {
      const int64_t blocks_per_sm = decode_only ? 8 : 4;
      wanted = (blocks_per_sm * num_sms + base_blocks - 1) / base_blocks;
    }
    // Splits of at least 256 keys keep the partials small next to the keys. The decode kernel's
    // partials are 4-8 rows per KV group, so it goes down to 128 (short contexts then fill more
    // than one wave of blocks); wide (MLA) rows are compute-bound and a decode batch of them has
    // few row tiles, so they split down to one tile.
    // The MLA decode kernel's splits go through the workspace and the combine kernel, whose loop
    // over 64 splits of a 1K context took 20 us per layer at batch 1 (the attention 18 us): its
    // splits keep at least 128 keys.
    const int64_t min_split_keys =
        mla_decode ? 128 : (params.head_dim > 256 ? kTileKeys : (mma_kernel_decode ? 64 : (decode_only ? 128 : 256)));
    int64_t splits = std::clamp<int64_t>(wanted, 1, (max_keys + min_split_keys - 1) / min_split_keys);
    // A few sequences want more splits than a cluster holds; their combine kernel took ~14 us per
    // layer at batch 1 (the attention itself ~5 us), so they take the cluster's size instead when
    // that grid still covers half the SMs or the splits stay short (latency-bound either way).
    if (splits > max_cluster && max_cluster > 1 &&
        (base_blocks * max_cluster * 2 >= num_sms || max_keys <= max_cluster * 1024)) {
      splits = max_cluster;
    }
    // A grid of at most one block per SM runs as the lean-carveout twin, one block per SM
    // (kernels/cuda/shared_carveout.h). Its clusters of 16 took ~5 us more per layer at batch 1 on
    // the H200 than clusters of 8 (half the splits, twice the keys each): such grids take 8.
    constexpr int64_t kLeanCluster = 8;
    if (mma_decode && splits > kLeanCluster && base_blocks * splits <= num_sms) splits = kLeanCluster;
    const int64_t keys = (max_keys + splits - 1) / splits;
    plan.split_keys = static_cast<int32_t>((keys + kTileKeys - 1) / kTileKeys * kTileKeys);
  }
  plan.num_splits = static_cast<int32_t>((max_keys + plan.split_keys - 1) / plan.split_keys);
  plan.combine_in_cluster = plan.num_splits > 1 && plan.num_splits <= max_cluster;
  plan.balanced_splits = mma_decode || mla_decode;
  if (!plan.combine_in_cluster && (plan.num_splits > 1 || fixed_split_keys > 0)) {
    plan.workspace_bytes = static_cast<size_t>(plan.num_splits) * static_cast<size_t>(batch.num_tokens) *
                           static_cast<size_t>(params.num_heads) * static_cast<size_t>(params.head_dim + 2) *
                           sizeof(float);
  }
  return plan;
}

void paged_attention(const float* q, const void* k_cache, const void* v_cache, const PagedBatch& batch,
                     const AttentionParams& params, const AttentionPlan& plan, void* workspace, float* out,
                     cudaStream_t stream, const AttentionFrontEnd* front) {
  if (batch.num_seqs == 0 || batch.num_tokens == 0) return;
  DI_CHECK(front == nullptr || (plan.balanced_splits && !general_kernel_needed(batch, params)),
           "paged_attention folds the front end only into a decode-only tensor-core plan");
  DI_CHECK(
      params.cache_dtype == DType::kF32 || params.cache_dtype == DType::kBF16 || params.cache_dtype == DType::kF8E4M3,
      "paged_attention: cache dtype " << dtype_name(params.cache_dtype) << " with head_dim " << params.head_dim);
  const bool decode_kernel = detail::decode_kernel_fits(params);
  AttentionArgs args{q,
                     k_cache,
                     v_cache,
                     batch,
                     params,
                     plan.split_keys,
                     plan.num_splits,
                     plan.workspace_bytes > 0,
                     decode_kernel,
                     out,
                     static_cast<float*>(workspace),
                     plan.combine_in_cluster,
                     plan.balanced_splits};
  if (decode_kernel) detail::launch_decode_attention(args, front, stream);
  if (general_kernel_needed(batch, params)) {
    const int32_t group = params.num_heads / params.num_kv_heads;
    const int32_t rpw = rows_per_warp(batch, params);
    const int32_t rows = kWarps * rpw;
    const auto row_tiles = static_cast<unsigned>((int64_t{batch.max_query_len} * group + rows - 1) / rows);
    if (params.cache_dtype == DType::kBF16) {
      launch_general<__nv_bfloat16>(args, rpw, row_tiles, stream);
    } else if (params.cache_dtype == DType::kF8E4M3) {
      launch_general<KvFp8>(args, rpw, row_tiles, stream);
    } else {
      launch_general<float>(args, rpw, row_tiles, stream);
    }
  }
  if (args.write_partials) {
    const int64_t num_warps = int64_t{batch.num_tokens} * params.num_heads * ((params.head_dim + 31) / 32);
    const dim3 grid(static_cast<unsigned>((num_warps + kWarps - 1) / kWarps));
    launch_dependent(combine_splits_kernel, grid, dim3(kWarps * 32), 0, stream, args);
    DI_CUDA_CHECK_LAUNCH("combine_splits_kernel");
  }
}

}  // namespace deepinfer::kernels::cuda
