// Flash-attention-2 style paged prefill on tensor cores (mma.sync m16n8k16, bf16 in, fp32 out).
// A first kernel copies the keys and values the step's queries can see from the paged cache (f32,
// bf16 or fp8 codes times their scales) to a bf16 workspace, contiguous per (sequence, kv head): reading pages in place
// measured slower (a block-table lookup per key and chunk in the tile loader). The attention kernel streams 64-key
// tiles of it through shared memory with cp.async (double-buffered) and keeps an fp32 online softmax per row. A block
// takes the query rows (token, head) of one sequence that share one kv head, so the group's heads share every K/V tile;
// each of its 4 warps owns 16 rows, or 32 for long prompts.
#include <cuda_bf16.h>

#include <algorithm>
#include <cmath>

#include "core/check.h"
#include "kernels/cuda/attention_prefill.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/head_gemm.h"
#include "kernels/cuda/kv_cache.cuh"
#include "kernels/cuda/mma_util.cuh"

namespace deepinfer::kernels::cuda {
namespace {

constexpr int kWarps = 4;
constexpr int kThreads = kWarps * 32;
// Query rows of one kv head from which a block takes 32 rows per warp instead of 16.
constexpr int kWideRows = 512;
constexpr int kTileKeys = 64;
// bf16 elements of padding per shared-memory row: consecutive rows start 16 bytes apart in the
// banks, so the 8 row reads of an ldmatrix hit distinct banks.
constexpr int kPad = 8;
constexpr int kGatherKeys = 16;
constexpr float kLog2e = 1.4426950408889634f;

// The first cache position a query at first_pos can see, aligned down to a key tile (the attention
// kernel reads whole tiles from there, so the gather must fill them).
__host__ __device__ __forceinline__ int32_t first_key(int32_t first_pos, int32_t window) {
  if (window <= 0) return 0;
  const int32_t begin = first_pos - window + 1;
  return begin <= 0 ? 0 : begin / kTileKeys * kTileKeys;
}

int64_t max_keys_of(const PagedBatch& batch) {
  const int64_t keys = std::max<int64_t>(int64_t{batch.max_blocks_per_seq} * batch.block_size, 1);
  return (keys + kTileKeys - 1) / kTileKeys * kTileKeys;
}

__device__ __forceinline__ uint2 to_bf16x4(float4 x) { return make_uint2(pack_bf16(x.x, x.y), pack_bf16(x.z, x.w)); }

// 2^x with the hardware approximation (2 ulp); 2^-inf = 0.
__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
  return y;
}

// 16 bytes global -> shared, asynchronous; src_bytes 0 writes zeros (keys past the end).
__device__ __forceinline__ void cp_async_16(void* dst, const void* src, uint32_t src_bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(shared_address(dst)), "l"(src),
               "r"(src_bytes)
               : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int kPending>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(kPending) : "memory");
}

// Four cache elements at element offset at (of the row's columns column..), as bf16: copied, or
// rounded from their float32 values (an fp8 code times its scale, kv_cache.cuh).
template <typename T>
__device__ __forceinline__ uint2 load_bf16x4(const T* cache, int64_t at, const float* scales, int64_t column) {
  return to_bf16x4(load_kv4(cache, at, scales, column));
}
template <>
__device__ __forceinline__ uint2 load_bf16x4(const __nv_bfloat16* cache, int64_t at, const float* /*scales*/,
                                             int64_t /*column*/) {
  return *reinterpret_cast<const uint2*>(cache + at);
}

template <typename T>
struct GatherArgs {
  const T* k_cache;  // [num_blocks, block_size, num_kv_heads, head_dim]
  const T* v_cache;
  PagedBatch batch;
  AttentionParams params;
  int64_t max_keys;
  __nv_bfloat16* k;  // [num_seqs, num_kv_heads, max_keys, head_dim]
  __nv_bfloat16* v;  // null: the keys only (MLA's latent rows)
};

// Block (x, seq) copies cache positions [x * kGatherKeys, (x + 1) * kGatherKeys) of seq, all kv heads.
template <typename T>
__global__ void __launch_bounds__(256) gather_kv_kernel(GatherArgs<T> a) {
  const auto seq = static_cast<int32_t>(blockIdx.y);
  const int32_t seq_len = a.batch.seq_len[seq];
  const int32_t num_new = a.batch.query_start[seq + 1] - a.batch.query_start[seq];
  const int32_t chunk_begin = static_cast<int32_t>(blockIdx.x) * kGatherKeys;
  const int32_t p_begin = max(chunk_begin, first_key(seq_len - num_new, a.params.sliding_window));
  const int32_t p_end = min(chunk_begin + kGatherKeys, seq_len);
  const int32_t head_dim = a.params.head_dim;
  const int32_t vectors = a.params.num_kv_heads * head_dim / 4;  // float4s per cache position
  const int32_t block_size = a.batch.block_size;
  const int32_t* blocks = a.batch.block_table + static_cast<int64_t>(seq) * a.batch.max_blocks_per_seq;
  for (int32_t i = static_cast<int32_t>(threadIdx.x); i < (p_end - p_begin) * vectors;
       i += static_cast<int32_t>(blockDim.x)) {
    const int32_t p = p_begin + i / vectors;
    const int32_t e = i % vectors * 4;
    const int64_t src = (static_cast<int64_t>(blocks[p / block_size]) * block_size + p % block_size) * vectors * 4 + e;
    const int64_t dst =
        ((static_cast<int64_t>(seq) * a.params.num_kv_heads + e / head_dim) * a.max_keys + p) * head_dim +
        e % head_dim;
    *reinterpret_cast<uint2*>(a.k + dst) = load_bf16x4(a.k_cache, src, a.params.cache_scales.k, e);
    if (a.v != nullptr) *reinterpret_cast<uint2*>(a.v + dst) = load_bf16x4(a.v_cache, src, a.params.cache_scales.v, e);
  }
}

// Where a block's keys and values are, in bf16 elements: key j of (sequence, kv head) at
// k + seq * k_seq_stride + head * k_head_stride + j * k_key_stride, likewise v; with k_tail set
// (MLA), a key's last kTailDims dims come from k_tail + seq * tail_seq_stride + j * tail_key_stride
// instead, shared by the heads (the rope key). Without k_tail the key strides must be the head
// sizes (prefill_attention's gathered layout).
struct KvLayout {
  const __nv_bfloat16* k = nullptr;
  int64_t k_seq_stride = 0, k_head_stride = 0, k_key_stride = 0;
  const __nv_bfloat16* k_tail = nullptr;
  int64_t tail_seq_stride = 0, tail_key_stride = 0;
  const __nv_bfloat16* v = nullptr;
  int64_t v_seq_stride = 0, v_head_stride = 0, v_key_stride = 0;
};

struct PrefillArgs {
  const float* q;  // [num_tokens, num_heads, kDimsK]
  PagedBatch batch;
  AttentionParams params;
  KvLayout kv;
  float* out;  // [num_tokens, num_heads, kDimsV]
};

// Copies the kWidth columns of one key tile that sit key_stride elements apart per key in global
// memory to columns [column, column + kWidth) of a shared tile of kStride-element rows: thread
// tid always copies the same 16-byte chunk of keys tid / kChunks + j * kKeysPerPass. Keys at or
// past keys_left read as zeros.
template <int kWidth, int kStride>
struct StripLoader {
  static constexpr int kChunks = kWidth > 0 ? kWidth / 8 : 1;
  static constexpr int kKeysPerPass = kThreads / kChunks;
  static_assert(kWidth == 0 || (kThreads % kChunks == 0 && kTileKeys % kKeysPerPass == 0));
  const __nv_bfloat16* src = nullptr;
  int64_t pass_stride = 0;
  int dst = 0;
  int key = 0;

  __device__ StripLoader(const __nv_bfloat16* base, int64_t key_stride, int column, int tid) {
    if constexpr (kWidth > 0) {
      key = tid / kChunks;
      const int d = tid % kChunks * 8;
      src = base + key * key_stride + d;
      pass_stride = kKeysPerPass * key_stride;
      dst = key * kStride + column + d;
    }
  }
  __device__ void load(__nv_bfloat16* tile, int64_t begin_offset, int32_t keys_left) const {
    static_assert(kWidth > 0);
#pragma unroll
    for (int j = 0; j < kTileKeys / kKeysPerPass; ++j) {
      cp_async_16(tile + dst + j * kKeysPerPass * kStride, src + begin_offset + j * pass_stride,
                  key + j * kKeysPerPass < keys_left ? 16 : 0);
    }
  }
};

// A warp owns kMTiles * 16 rows: two m-tiles use each K/V fragment read from shared memory twice.
template <int kMTiles>
__host__ __device__ constexpr int block_rows() {
  return kWarps * 16 * kMTiles;
}

template <int kDimsK, int kDimsV, int kMTiles>
constexpr size_t shared_bytes() {
  return (static_cast<size_t>(block_rows<kMTiles>() + 2 * kTileKeys) * (kDimsK + kPad) +
          static_cast<size_t>(2 * kTileKeys) * (kDimsV + kPad)) *
         sizeof(__nv_bfloat16);
}

// Grid (row tiles, kv heads, sequences); rows of a sequence are (token, head in group), token-major.
// q.k runs over kDimsK dims, the values have kDimsV (equal but for MLA's expanded form, 192 / 128).
template <int kDimsK, int kDimsV, int kTailDims, int kMTiles>
__global__ void __launch_bounds__(kThreads) prefill_attention_kernel(PrefillArgs a) {
  constexpr int kStrideK = kDimsK + kPad;
  constexpr int kStrideV = kDimsV + kPad;
  constexpr int kBlockRows = block_rows<kMTiles>();
  // Small q fragments stay in registers; larger ones would crowd out the output accumulators, so
  // they are re-read from shared memory per tile.
  constexpr bool kQInRegisters = kMTiles == 1 && kDimsK <= 128;
  constexpr int kDimSteps = kDimsK / 16;
  extern __shared__ uint4 shared_raw[];
  auto* q_tile = reinterpret_cast<__nv_bfloat16*>(shared_raw);  // [kBlockRows, kStrideK]
  __nv_bfloat16* k_tiles = q_tile + kBlockRows * kStrideK;      // [2, kTileKeys, kStrideK]
  __nv_bfloat16* v_tiles = k_tiles + 2 * kTileKeys * kStrideK;  // [2, kTileKeys, kStrideV]

  // The last row tiles see the most keys: they start first so the grid's tail is short.
  const auto tile = static_cast<int32_t>(gridDim.x - 1 - blockIdx.x);
  const auto kv_head = static_cast<int32_t>(blockIdx.y);
  const auto seq = static_cast<int32_t>(blockIdx.z);
  const int32_t num_heads = a.params.num_heads;
  const int32_t group = num_heads / a.params.num_kv_heads;
  const int32_t window = a.params.sliding_window;
  const int32_t q_begin = a.batch.query_start[seq];
  const int32_t num_new = a.batch.query_start[seq + 1] - q_begin;
  const int32_t num_rows = num_new * group;
  const int32_t row0 = tile * kBlockRows;
  if (row0 >= num_rows) return;
  const int32_t pos_offset = a.batch.seq_len[seq] - num_new;  // position of the first new token
  const int32_t first_pos = pos_offset + row0 / group;
  const int32_t last_pos = pos_offset + (min(row0 + kBlockRows, num_rows) - 1) / group;
  const int32_t key_begin = first_key(first_pos, window);
  const int32_t key_end = last_pos + 1;
  const int32_t num_tiles = (key_end - key_begin + kTileKeys - 1) / kTileKeys;

  const int tid = static_cast<int>(threadIdx.x);
  const int warp = tid / 32;
  const int lane = tid % 32;
  const KvLayout& kv = a.kv;
  constexpr int kMainDims = kDimsK - kTailDims;
  // The gathered layout (no tail) has its keys head_dim apart: a constant keeps the per-tile
  // address arithmetic out of registers.
  const int64_t k_key_stride = kTailDims > 0 ? kv.k_key_stride : kDimsK;
  const int64_t v_key_stride = kTailDims > 0 ? kv.v_key_stride : kDimsV;
  const StripLoader<kMainDims, kStrideK> k_main(kv.k + seq * kv.k_seq_stride + kv_head * kv.k_head_stride,
                                                k_key_stride, 0, tid);
  const StripLoader<kTailDims, kStrideK> k_tail(kv.k_tail + seq * kv.tail_seq_stride, kv.tail_key_stride, kMainDims,
                                                tid);
  const StripLoader<kDimsV, kStrideV> v_all(kv.v + seq * kv.v_seq_stride + kv_head * kv.v_head_stride, v_key_stride,
                                            0, tid);
  const auto load_tile = [&](int buffer, int32_t begin) {
    const int32_t keys_left = key_end - begin;
    k_main.load(k_tiles + buffer * kTileKeys * kStrideK, begin * k_key_stride, keys_left);
    if constexpr (kTailDims > 0) {
      k_tail.load(k_tiles + buffer * kTileKeys * kStrideK, begin * kv.tail_key_stride, keys_left);
    }
    v_all.load(v_tiles + buffer * kTileKeys * kStrideV, begin * v_key_stride, keys_left);
  };
  load_tile(0, key_begin);
  cp_async_commit();

  // q rows to bf16; rows past the sequence are zeros (computed, never written).
  for (int i = tid; i < kBlockRows * kDimsK / 4; i += kThreads) {
    const int r = i / (kDimsK / 4);
    const int d = i % (kDimsK / 4) * 4;
    const int32_t row = row0 + r;
    float4 x = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    if (row < num_rows) {
      const int64_t token = q_begin + row / group;
      const int32_t head = kv_head * group + row % group;
      x = *reinterpret_cast<const float4*>(a.q + (token * num_heads + head) * kDimsK + d);
    }
    *reinterpret_cast<uint2*>(q_tile + r * kStrideK + d) = to_bf16x4(x);
  }
  __syncthreads();

  const __nv_bfloat16* q_warp = q_tile + warp * 16 * kMTiles * kStrideK;
  const auto load_q = [&](int mt, int step, uint32_t (&frag)[4]) {
    ldmatrix_x4(frag, q_warp + (mt * 16 + lane % 16) * kStrideK + step * 16 + lane / 16 * 8);
  };
  uint32_t q_frag[kQInRegisters ? kMTiles : 1][kQInRegisters ? kDimSteps : 1][4];
  if constexpr (kQInRegisters) {
#pragma unroll
    for (int mt = 0; mt < kMTiles; ++mt) {
#pragma unroll
      for (int step = 0; step < kDimSteps; ++step) load_q(mt, step, q_frag[mt][step]);
    }
  }

  // This thread's accumulator rows in m-tile mt: lane / 4 and lane / 4 + 8 of its 16.
  const int32_t my_row = row0 + warp * 16 * kMTiles + lane / 4;
  int32_t pos[kMTiles][2];
#pragma unroll
  for (int mt = 0; mt < kMTiles; ++mt) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int32_t row = my_row + mt * 16 + 8 * r;
      pos[mt][r] = row < num_rows ? pos_offset + row / group : -1;
    }
  }
  const float scale_log2 = a.params.scale * kLog2e;
  float o[kMTiles][kDimsV / 8][4] = {};
  float m[kMTiles][2];  // running max of raw scores q.k
  float l[kMTiles][2];  // this thread's part of the row sums
#pragma unroll
  for (int mt = 0; mt < kMTiles; ++mt) {
    m[mt][0] = m[mt][1] = -INFINITY;
    l[mt][0] = l[mt][1] = 0.0f;
  }

  for (int32_t t = 0; t < num_tiles; ++t) {
    const int32_t tile_begin = key_begin + t * kTileKeys;
    if (t + 1 < num_tiles) {
      load_tile((t + 1) & 1, tile_begin + kTileKeys);
      cp_async_commit();
      cp_async_wait<1>();
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();
    const __nv_bfloat16* k_tile = k_tiles + (t & 1) * kTileKeys * kStrideK;
    const __nv_bfloat16* v_tile = v_tiles + (t & 1) * kTileKeys * kStrideV;

    float s[kMTiles][kTileKeys / 8][4] = {};
#pragma unroll
    for (int step = 0; step < kDimSteps; ++step) {
      uint32_t qa[kMTiles][4];
#pragma unroll
      for (int mt = 0; mt < kMTiles; ++mt) {
        if constexpr (kQInRegisters) {
#pragma unroll
          for (int j = 0; j < 4; ++j) qa[mt][j] = q_frag[mt][step][j];
        } else {
          load_q(mt, step, qa[mt]);
        }
      }
#pragma unroll
      for (int pair = 0; pair < kTileKeys / 16; ++pair) {
        uint32_t b[4];
        ldmatrix_x4(b, k_tile + (pair * 16 + lane % 8 + lane / 16 * 8) * kStrideK + step * 16 + lane / 8 % 2 * 8);
#pragma unroll
        for (int mt = 0; mt < kMTiles; ++mt) {
          mma_bf16(s[mt][2 * pair], qa[mt], b[0], b[1]);
          mma_bf16(s[mt][2 * pair + 1], qa[mt], b[2], b[3]);
        }
      }
    }

    // Masks only on tiles that cross a row's causal or window edge (block-uniform test).
    const bool unmasked = tile_begin + kTileKeys - 1 <= first_pos && (window == 0 || tile_begin > last_pos - window);
    if (!unmasked) {
#pragma unroll
      for (int mt = 0; mt < kMTiles; ++mt) {
#pragma unroll
        for (int j = 0; j < kTileKeys / 8; ++j) {
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int32_t key = tile_begin + j * 8 + lane % 4 * 2 + e % 2;
            const int32_t p = pos[mt][e / 2];
            if (key > p || (window > 0 && p - key >= window)) s[mt][j][e] = -INFINITY;
          }
        }
      }
    }

#pragma unroll
    for (int mt = 0; mt < kMTiles; ++mt) {
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        float row_max = m[mt][r];
#pragma unroll
        for (int j = 0; j < kTileKeys / 8; ++j) row_max = fmaxf(row_max, fmaxf(s[mt][j][2 * r], s[mt][j][2 * r + 1]));
        row_max = fmaxf(row_max, __shfl_xor_sync(0xffffffffu, row_max, 1));
        row_max = fmaxf(row_max, __shfl_xor_sync(0xffffffffu, row_max, 2));
        // A row that has seen no key keeps max -inf; exp2 of (-inf) - (-inf) would be NaN.
        const float base = row_max == -INFINITY ? 0.0f : row_max * scale_log2;
        const float alpha = fast_exp2(m[mt][r] * scale_log2 - base);
        m[mt][r] = row_max;
        // Once a row's max settles (most tiles of a long prompt), alpha is exactly 1.
        if (alpha != 1.0f) {
          l[mt][r] *= alpha;
#pragma unroll
          for (int n = 0; n < kDimsV / 8; ++n) {
            o[mt][n][2 * r] *= alpha;
            o[mt][n][2 * r + 1] *= alpha;
          }
        }
#pragma unroll
        for (int j = 0; j < kTileKeys / 8; ++j) {
          s[mt][j][2 * r] = fast_exp2(fmaf(s[mt][j][2 * r], scale_log2, -base));
          s[mt][j][2 * r + 1] = fast_exp2(fmaf(s[mt][j][2 * r + 1], scale_log2, -base));
          l[mt][r] += s[mt][j][2 * r] + s[mt][j][2 * r + 1];
        }
      }
    }

    // The score accumulators of two key n-tiles are, element for element, the A fragment of P.
#pragma unroll
    for (int step = 0; step < kTileKeys / 16; ++step) {
      uint32_t pa[kMTiles][4];
#pragma unroll
      for (int mt = 0; mt < kMTiles; ++mt) {
        pa[mt][0] = pack_bf16(s[mt][2 * step][0], s[mt][2 * step][1]);
        pa[mt][1] = pack_bf16(s[mt][2 * step][2], s[mt][2 * step][3]);
        pa[mt][2] = pack_bf16(s[mt][2 * step + 1][0], s[mt][2 * step + 1][1]);
        pa[mt][3] = pack_bf16(s[mt][2 * step + 1][2], s[mt][2 * step + 1][3]);
      }
#pragma unroll
      for (int pair = 0; pair < kDimsV / 16; ++pair) {
        uint32_t b[4];
        ldmatrix_x4_trans(b, v_tile + (step * 16 + lane % 8 + lane / 8 % 2 * 8) * kStrideV + pair * 16 + lane / 16 * 8);
#pragma unroll
        for (int mt = 0; mt < kMTiles; ++mt) {
          mma_bf16(o[mt][2 * pair], pa[mt], b[0], b[1]);
          mma_bf16(o[mt][2 * pair + 1], pa[mt], b[2], b[3]);
        }
      }
    }
    __syncthreads();  // this buffer is refilled two tiles on
  }

#pragma unroll
  for (int mt = 0; mt < kMTiles; ++mt) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      l[mt][r] += __shfl_xor_sync(0xffffffffu, l[mt][r], 1);
      l[mt][r] += __shfl_xor_sync(0xffffffffu, l[mt][r], 2);
    }
  }
#pragma unroll
  for (int mt = 0; mt < kMTiles; ++mt) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int32_t row = my_row + mt * 16 + 8 * r;
      if (row >= num_rows) continue;
      const int64_t token = q_begin + row / group;
      const int32_t head = kv_head * group + row % group;
      float denom = l[mt][r];
      float rescale = 1.0f;
      if (a.params.sinks != nullptr) {
        const float sink = a.params.sinks[head] * kLog2e;
        const float row_max = m[mt][r] * scale_log2;
        const float m_all = fmaxf(row_max, sink);
        rescale = exp2f(row_max - m_all);
        denom = l[mt][r] * rescale + exp2f(sink - m_all);
      }
      const float factor = rescale / denom;
      float* dst = a.out + (token * num_heads + head) * kDimsV + lane % 4 * 2;
#pragma unroll
      for (int n = 0; n < kDimsV / 8; ++n) {
        *reinterpret_cast<float2*>(dst + n * 8) =
            make_float2(o[mt][n][2 * r] * factor, o[mt][n][2 * r + 1] * factor);
      }
    }
  }
}

template <int kDimsK, int kDimsV, int kTailDims, int kMTiles>
void launch(const PrefillArgs& args, cudaStream_t stream) {
  constexpr size_t kSharedBytes = shared_bytes<kDimsK, kDimsV, kMTiles>();
  constexpr auto kernel = prefill_attention_kernel<kDimsK, kDimsV, kTailDims, kMTiles>;
  static const bool configured = [] {
    DI_CUDA_CHECK(
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(kSharedBytes)));
    return true;
  }();
  (void)configured;
  const int64_t rows = int64_t{args.batch.max_query_len} * (args.params.num_heads / args.params.num_kv_heads);
  const auto row_tiles = static_cast<unsigned>((rows + block_rows<kMTiles>() - 1) / block_rows<kMTiles>());
  const dim3 grid(row_tiles, static_cast<unsigned>(args.params.num_kv_heads),
                  static_cast<unsigned>(args.batch.num_seqs));
  kernel<<<grid, kThreads, kSharedBytes, stream>>>(args);
  DI_CUDA_CHECK_LAUNCH("prefill_attention_kernel");
}

// Long prompts take 32 rows per warp (half the shared-memory reads per mma); short ones, and
// q.k over more than 128 dims (registers), 16.
template <int kDimsK, int kDimsV = kDimsK, int kTailDims = 0>
void launch_for_rows(const PrefillArgs& args, cudaStream_t stream) {
  if constexpr (kDimsK <= 128) {
    const int64_t rows = int64_t{args.batch.max_query_len} * (args.params.num_heads / args.params.num_kv_heads);
    if (rows >= kWideRows) return launch<kDimsK, kDimsV, kTailDims, 2>(args, stream);
  }
  return launch<kDimsK, kDimsV, kTailDims, 1>(args, stream);
}

template <typename T>
void launch_gather(const void* k_cache, const void* v_cache, const PagedBatch& batch, const AttentionParams& params,
                   int64_t max_keys, __nv_bfloat16* k, __nv_bfloat16* v, cudaStream_t stream) {
  const GatherArgs<T> gather{static_cast<const T*>(k_cache), static_cast<const T*>(v_cache), batch, params, max_keys,
                             k, v};
  const dim3 grid(static_cast<unsigned>((max_keys + kGatherKeys - 1) / kGatherKeys),
                  static_cast<unsigned>(batch.num_seqs));
  gather_kv_kernel<T><<<grid, 256, 0, stream>>>(gather);
  DI_CUDA_CHECK_LAUNCH("gather_kv_kernel");
}

// The step's visible keys and values (of params.cache_dtype, with params.cache_scales) as bf16.
void gather_kv(const void* k_cache, const void* v_cache, const PagedBatch& batch, const AttentionParams& params,
               int64_t max_keys, __nv_bfloat16* k, __nv_bfloat16* v, cudaStream_t stream) {
  switch (params.cache_dtype) {
    case DType::kBF16:
      return launch_gather<__nv_bfloat16>(k_cache, v_cache, batch, params, max_keys, k, v, stream);
    case DType::kF8E4M3:
      return launch_gather<KvFp8>(k_cache, v_cache, batch, params, max_keys, k, v, stream);
    default:
      DI_CHECK(params.cache_dtype == DType::kF32, "prefill attention: cache dtype " << dtype_name(params.cache_dtype));
      return launch_gather<float>(k_cache, v_cache, batch, params, max_keys, k, v, stream);
  }
}

}  // namespace

bool prefill_attention_supported(const AttentionParams& params) {
  return params.head_dim == 64 || params.head_dim == 128 || params.head_dim == 256;
}

size_t prefill_attention_workspace_bytes(const PagedBatch& batch, const AttentionParams& params) {
  return size_t{2} * static_cast<size_t>(batch.num_seqs) * static_cast<size_t>(params.num_kv_heads) *
         static_cast<size_t>(max_keys_of(batch)) * static_cast<size_t>(params.head_dim) * sizeof(__nv_bfloat16);
}

void prefill_attention(const float* q, const void* k_cache, const void* v_cache, const PagedBatch& batch,
                       const AttentionParams& params, void* workspace, float* out, cudaStream_t stream) {
  if (batch.num_seqs == 0) return;
  DI_CHECK(prefill_attention_supported(params), "prefill_attention: head_dim " << params.head_dim);
  DI_CHECK(params.num_kv_heads > 0 && params.num_heads % params.num_kv_heads == 0,
           "num_heads " << params.num_heads << ", num_kv_heads " << params.num_kv_heads);
  DI_CHECK(batch.num_tokens > 0 && batch.max_query_len > 0, "PagedBatch needs its host-side sizes");
  const int64_t max_keys = max_keys_of(batch);
  auto* k = static_cast<__nv_bfloat16*>(workspace);
  __nv_bfloat16* v = k + static_cast<int64_t>(batch.num_seqs) * params.num_kv_heads * max_keys * params.head_dim;
  gather_kv(k_cache, v_cache, batch, params, max_keys, k, v, stream);
  const int64_t head_stride = max_keys * params.head_dim;
  KvLayout kv;
  kv.k = k;
  kv.v = v;
  kv.k_seq_stride = kv.v_seq_stride = params.num_kv_heads * head_stride;
  kv.k_head_stride = kv.v_head_stride = head_stride;
  kv.k_key_stride = kv.v_key_stride = params.head_dim;
  const PrefillArgs args{q, batch, params, kv, out};
  switch (params.head_dim) {
    case 64: return launch_for_rows<64>(args, stream);
    case 128: return launch_for_rows<128>(args, stream);
    default: return launch_for_rows<256>(args, stream);
  }
}

bool mla_prefill_supported(const MlaExpandedAttention& a) {
  return a.nope == 128 && a.rope == 64 && a.v_dim == 128 && a.kv_b.dtype == DType::kBF16 &&
         (a.cache_dtype == DType::kBF16 || a.cache_dtype == DType::kF32 || a.cache_dtype == DType::kF8E4M3);
}

size_t mla_prefill_workspace_bytes(const PagedBatch& batch, const MlaExpandedAttention& a) {
  const auto rows = static_cast<size_t>(batch.num_seqs) * static_cast<size_t>(max_keys_of(batch));
  return rows * static_cast<size_t>(a.kv_lora_rank + a.rope + a.num_heads * (a.nope + a.v_dim)) *
         sizeof(__nv_bfloat16);
}

void mla_prefill_attention(const PagedBatch& batch, const MlaExpandedAttention& a, HeadGemm& gemm, void* workspace,
                           cudaStream_t stream) {
  if (batch.num_seqs == 0) return;
  DI_CHECK(mla_prefill_supported(a), "mla_prefill_attention: nope " << a.nope << ", rope " << a.rope << ", v "
                                                                    << a.v_dim << ", kv_b " << dtype_name(a.kv_b.dtype));
  DI_CHECK(batch.num_tokens > 0 && batch.max_query_len > 0, "PagedBatch needs its host-side sizes");
  const int64_t max_keys = max_keys_of(batch);
  const int64_t row = a.kv_lora_rank + a.rope;
  const int64_t head_row = a.nope + a.v_dim;
  const int64_t expanded_row = a.num_heads * head_row;
  auto* latent = static_cast<__nv_bfloat16*>(workspace);        // [num_seqs, max_keys, row]
  __nv_bfloat16* expanded = latent + batch.num_seqs * max_keys * row;  // [num_seqs * max_keys, heads, nope + v]
  // The latent rows as one shared "kv head" of row dims, keys only.
  AttentionParams gather_params;
  gather_params.num_heads = 1;
  gather_params.num_kv_heads = 1;
  gather_params.head_dim = static_cast<int32_t>(row);
  gather_params.cache_dtype = a.cache_dtype;
  gather_params.cache_scales = a.cache_scales;
  gather_kv(a.latent_cache, nullptr, batch, gather_params, max_keys, latent, nullptr, stream);
  // Rows past a sequence's length expand garbage that the attention kernel never loads.
  gemm.bf16_product(latent, row, a.kv_b, batch.num_seqs * max_keys, expanded, stream);
  KvLayout kv;
  kv.k = expanded;
  kv.v = expanded + a.nope;
  kv.k_seq_stride = kv.v_seq_stride = max_keys * expanded_row;
  kv.k_head_stride = kv.v_head_stride = head_row;
  kv.k_key_stride = kv.v_key_stride = expanded_row;
  kv.k_tail = latent + a.kv_lora_rank;
  kv.tail_seq_stride = max_keys * row;
  kv.tail_key_stride = row;
  AttentionParams params;
  params.num_heads = a.num_heads;
  params.num_kv_heads = a.num_heads;
  params.head_dim = a.nope + a.rope;
  params.scale = a.scale;
  launch_for_rows<128 + 64, 128, 64>(PrefillArgs{a.q, batch, params, kv, a.out}, stream);
}

}  // namespace deepinfer::kernels::cuda
