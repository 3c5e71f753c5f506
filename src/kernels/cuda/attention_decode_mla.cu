// Decode attention over MLA's latent cache in bf16 on tensor cores (mma.sync m16n8k16): one latent
// head of 576 dims (512 latent + 64 rope) that is both key and value, read once for 16 query heads
// (the MMA's 16 rows). A block serves one (split, group of 16 heads, sequence); its 4 warps share
// each 16-key tile and split the dims: warp w takes dims [144w, 144w + 144) of q.k (partial scores
// summed across warps in shared memory) and of p.v (its own 144 output dims per head). The softmax
// runs between the two products, one row per 8 threads. Tiles stream through a 5-stage cp.async
// ring, each thread copying one key's row in 9 chunks, so 4 tiles are in flight while one is used.
// q and p enter the MMAs rounded to bf16, as in FlashMLA. Splits write the partials that
// combine_splits_kernel merges, or the normalised output when there is one. Head counts in
// multiples of 64 go to attention_decode_mla_wide.cu instead (64 heads a block on wgmma).
// An fp8 latent cache runs the same steps on f16 MMAs, as attention_decode_mma.cu does: its codes
// enter through ldmatrix as 16-bit pairs (one conversion per pair; q's fragments in the codes' dim
// order, p.v's tiles split into even and odd dims), the scales folded into q and the output; rows of
// 36 chunks sit 40 apart in a stage (the swizzle stays in the row), 8 stages deep.
#include <cmath>

#include "core/check.h"

#include "kernels/cuda/attention_internal.cuh"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/dependent_launch.cuh"
#include "kernels/cuda/mma_util.cuh"
#include "kernels/cuda/shared_carveout.h"

namespace deepinfer::kernels::cuda::detail {
namespace {

constexpr int kDims = 576;
constexpr int kHeads = 16;          // query heads per block: the MMA's rows
constexpr int kTileKeys = 16;
constexpr int kThreads = kWarps * 32;
constexpr int kWarpDims = kDims / kWarps;        // 144
constexpr int kWarpSteps = kWarpDims / 16;       // k-steps of q.k per warp: 9
constexpr int kWarpTiles = kWarpDims / 8;        // n-tiles of p.v per warp: 18
constexpr int kScoreStride = kTileKeys + 4;      // floats per row of a warp's partial scores
constexpr int kPStride = kTileKeys + 8;          // 16-bit p per row: 48 bytes, conflict-free ldmatrix
constexpr int kThreadsPerKey = kThreads / kTileKeys;  // 8 threads copy a key's row

// The latent rows of cache element T (__nv_bfloat16 or KvFp8) in a stage.
template <typename T>
struct MlaRows {
  static constexpr bool kFp8 = sizeof(T) == 1;
  static constexpr int kChunks = kDims * static_cast<int>(sizeof(T)) / 16;  // 16-byte chunks of a row: 72 or 36
  static constexpr int kRowChunks = kFp8 ? 40 : kChunks;  // a row's stride in a stage: the swizzle's 8 fit
  static constexpr int kCopies = (kChunks + kThreadsPerKey - 1) / kThreadsPerKey;  // per thread: 9 or 5
  static constexpr int kStages = kFp8 ? 8 : 5;
  static constexpr int kStageVec = kTileKeys * kRowChunks;
};

template <typename T>
struct Shared {
  float4 stages[MlaRows<T>::kStages][MlaRows<T>::kStageVec];  // chunk c of key k at c ^ (k % 8)
  float scores[kWarps][kHeads][kScoreStride];
  uint16_t p[kHeads][kPStride];  // bf16, or f16 for fp8 caches
  float alpha[kHeads];           // this tile's rescale of each row's accumulators
  float m[kHeads];               // the final max and denominator of each row (log2 units)
  float l[kHeads];
};
static_assert(kThreadsPerKey == 8, "a key's row is 8 threads' copies");

template <typename T>
__global__ void __launch_bounds__(kThreads, 2) mla_decode_kernel(AttentionArgs a) {
  using R = MlaRows<T>;
  constexpr bool kFp8 = R::kFp8;
  constexpr int kChunks = R::kChunks;
  constexpr int kStages = R::kStages;
  extern __shared__ float4 shared_raw[];
  Shared<T>& sh = *reinterpret_cast<Shared<T>*>(shared_raw);
  wait_for_previous_grid();
  allow_next_grid();
  const auto [decode, seq, token, split, head_block, group, key_begin, key_end] = decode_block(a);
  (void)group;
  if (!decode) return;
  const int tid = static_cast<int>(threadIdx.x);
  const int warp = tid / 32;
  const int lane = tid % 32;
  const int g = lane / 4;
  const int t = lane % 4;
  const int32_t head0 = head_block * kHeads;
  const PageTable pages = page_table(a, seq, kDims);
  const auto* cache = static_cast<const T*>(a.k_cache);
  const int32_t num_tiles = key_end > key_begin ? (key_end - key_begin + kTileKeys - 1) / kTileKeys : 0;

  // Thread tid copies chunks tid % 8 + 8j of key tid / 8 of each tile: 8 threads read a key's
  // contiguous 128-byte runs and write 8 distinct bank groups. The key's row offset is looked up
  // one tile ahead, so the copies of a tile never wait on the block table.
  const int copy_key = tid / kThreadsPerKey;
  const int copy_chunk = tid % kThreadsPerKey;
  const auto row_of = [&](int32_t n) -> int64_t {
    const int32_t pos = key_begin + n * kTileKeys + copy_key;
    return n < num_tiles && pos < key_end ? pages.row_offset(pos) : -1;
  };
  // Every call commits a group (empty past the last tile), so the wait count below stays exact.
  const auto issue = [&](int32_t n, int64_t row) {
    if (n < num_tiles) {
      float4* dst = sh.stages[n % kStages] + copy_key * R::kRowChunks;
#pragma unroll
      for (int j = 0; j < R::kCopies; ++j) {
        const int c = copy_chunk + kThreadsPerKey * j;
        if (c < kChunks) {
          cp_async16(dst + (c ^ (copy_key % 8)), cache + (row >= 0 ? row : 0) + c * (16 / static_cast<int>(sizeof(T))),
                     row >= 0);
        }
      }
    }
    cp_async_commit();
  };
#pragma unroll
  for (int n = 0; n < kStages - 1; ++n) issue(n, row_of(n));
  int64_t next_row = row_of(kStages - 1);

  // This warp's slice of q, pre-scaled into log2 units (and by an fp8 cache's scales), as the A
  // fragments of q.k: rows g, g + 8.
  const float q_scale = a.params.scale * kLog2e;
  const float* scales = kFp8 ? a.params.cache_scales.k : nullptr;
  uint32_t q_frag[kWarpSteps][4];
  {
    const float* q_rows = a.q + (static_cast<int64_t>(token) * a.params.num_heads + head0) * kDims;
#pragma unroll
    for (int kk = 0; kk < kWarpSteps; ++kk) {
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int row = g + (i % 2) * 8;
        const int column = 2 * t + (i / 2) * 8;
        const int d = warp * kWarpDims + kk * 16 + (kFp8 ? fp8_fragment_dim(column) : column);
        float2 x = *reinterpret_cast<const float2*>(q_rows + row * kDims + d);
        x.x *= q_scale;
        x.y *= q_scale;
        if (scales != nullptr) {
          x.x *= scales[d];
          x.y *= scales[d + 1];
        }
        q_frag[kk][i] = kFp8 ? pack_f16(x.x, x.y) : pack_bf16(x.x, x.y);
      }
    }
  }

  float o[kWarpTiles][4];
#pragma unroll
  for (int j = 0; j < kWarpTiles; ++j) {
#pragma unroll
    for (int i = 0; i < 4; ++i) o[j][i] = 0.0f;
  }
  // The softmax state of row tid / 8, the same in each of its 8 threads.
  const int soft_row = tid / 8;
  const int soft_key = tid % 8 * 2;
  float m_run = -INFINITY;
  float l_run = 0.0f;
  // ldmatrix rows: K as q.k's B (the tile's 16 keys x 16 dims: both n-tiles), V transposed as p.v's B.
  const int k_key = lane % 8 + lane / 16 * 8;
  const int k_chunk = lane / 8 % 2;
  const int v_key = lane % 8 + lane / 8 % 2 * 8;
  const int v_chunk = lane / 16;
  const int warp_chunk = warp * kWarpDims / 8;
  // fp8 rows: lane's ldmatrix row when the warp reads its 16-dim chunks kk and kk + 1 (matrices:
  // keys 0-7 and 8-15 of chunk kk, then of kk + 1; the warp's last, ninth chunk reads its own twice).
  const auto fp8_chunk_pair = [&](const float4* rows, int kk) {
    const int c = warp * kWarpSteps + kk + (kk + 1 < kWarpSteps ? lane / 16 : 0);
    return rows + lane % 16 * R::kRowChunks + (c ^ (lane % 8));
  };

  for (int32_t n = 0; n < num_tiles; ++n) {
    cp_async_wait<kStages - 2>();
    __syncthreads();  // tile n is in place; every warp is done with tile n - 1 (its stage, p, alpha)
    issue(n + kStages - 1, next_row);
    next_row = row_of(n + kStages);
    const float4* rows = sh.stages[n % kStages];

    float s[2][4] = {};
    if constexpr (kFp8) {
#pragma unroll
      for (int kk = 0; kk < kWarpSteps; kk += 2) {
        uint32_t b[4];
        ldmatrix_x4(b, fp8_chunk_pair(rows, kk));
#pragma unroll
        for (int u = 0; u < 2; ++u) {
          if (kk + u < kWarpSteps) {
            mma_f16(s[0], q_frag[kk + u], fp8x2_to_f16x2(b[2 * u] & 0xffffu), fp8x2_to_f16x2(b[2 * u] >> 16));
            mma_f16(s[1], q_frag[kk + u], fp8x2_to_f16x2(b[2 * u + 1] & 0xffffu),
                    fp8x2_to_f16x2(b[2 * u + 1] >> 16));
          }
        }
      }
    } else {
#pragma unroll
      for (int kk = 0; kk < kWarpSteps; ++kk) {
        const int c = warp_chunk + 2 * kk + k_chunk;
        uint32_t b[4];
        ldmatrix_x4(b, rows + k_key * kChunks + (c ^ (k_key % 8)));
        mma_bf16(s[0], q_frag[kk], b[0], b[1]);
        mma_bf16(s[1], q_frag[kk], b[2], b[3]);
      }
    }
#pragma unroll
    for (int nt = 0; nt < 2; ++nt) {
      *reinterpret_cast<float2*>(&sh.scores[warp][g][nt * 8 + 2 * t]) = make_float2(s[nt][0], s[nt][1]);
      *reinterpret_cast<float2*>(&sh.scores[warp][g + 8][nt * 8 + 2 * t]) = make_float2(s[nt][2], s[nt][3]);
    }
    __syncthreads();

    // Row soft_row's scores of keys soft_key, soft_key + 1: the warps' partials summed in warp order.
    const int32_t tile_begin = key_begin + n * kTileKeys;
    float x[2];
    float m_tile = -INFINITY;
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      float sum = 0.0f;
#pragma unroll
      for (int w = 0; w < kWarps; ++w) sum += sh.scores[w][soft_row][soft_key + e];
      x[e] = tile_begin + soft_key + e < key_end ? sum : -INFINITY;
      m_tile = fmaxf(m_tile, x[e]);
    }
#pragma unroll
    for (int offset = 1; offset < 8; offset <<= 1) m_tile = fmaxf(m_tile, __shfl_xor_sync(0xffffffffu, m_tile, offset));
    // The tile's first key is visible, so m_new is finite.
    const float m_new = fmaxf(m_run, m_tile);
    const float alpha = exp2f(m_run - m_new);
    const float p0 = exp2f(x[0] - m_new);
    const float p1 = exp2f(x[1] - m_new);
    float p_sum = p0 + p1;
#pragma unroll
    for (int offset = 1; offset < 8; offset <<= 1) p_sum += __shfl_xor_sync(0xffffffffu, p_sum, offset);
    l_run = l_run * alpha + p_sum;
    m_run = m_new;
    *reinterpret_cast<uint32_t*>(&sh.p[soft_row][soft_key]) = kFp8 ? pack_f16(p0, p1) : pack_bf16(p0, p1);
    if (soft_key == 0) sh.alpha[soft_row] = alpha;
    __syncthreads();

    const float alpha_lo = sh.alpha[g];
    const float alpha_hi = sh.alpha[g + 8];
#pragma unroll
    for (int j = 0; j < kWarpTiles; ++j) {
      o[j][0] *= alpha_lo;
      o[j][1] *= alpha_lo;
      o[j][2] *= alpha_hi;
      o[j][3] *= alpha_hi;
    }
    uint32_t pa[4];
    ldmatrix_x4(pa, &sh.p[lane % 16][lane / 16 * 8]);
    if constexpr (kFp8) {
      // Transposed, lane (g, t) holds dims 2g, 2g + 1 of keys 2t, 2t + 1: tiles 2c and 2c + 1 of the
      // warp's chunk c are its even and odd dims.
#pragma unroll
      for (int j = 0; j < kWarpSteps; j += 2) {
        uint32_t b[4];
        ldmatrix_x4_trans(b, fp8_chunk_pair(rows, j));
#pragma unroll
        for (int u = 0; u < 2; ++u) {
#pragma unroll
          for (int parity = 0; parity < 2; ++parity) {
            if (j + u < kWarpSteps) {
              const uint32_t select = parity == 0 ? 0x20u : 0x31u;  // bytes (0, 2) or (1, 3)
              mma_f16(o[2 * (j + u) + parity], pa, fp8x2_to_f16x2(__byte_perm(b[2 * u], 0, select)),
                      fp8x2_to_f16x2(__byte_perm(b[2 * u + 1], 0, select)));
            }
          }
        }
      }
    } else {
#pragma unroll
      for (int j = 0; j < kWarpTiles / 2; ++j) {
        const int c = warp_chunk + 2 * j + v_chunk;
        uint32_t b[4];
        ldmatrix_x4_trans(b, rows + v_key * kChunks + (c ^ (v_key % 8)));
        mma_bf16(o[2 * j], pa, b[0], b[1]);
        mma_bf16(o[2 * j + 1], pa, b[2], b[3]);
      }
    }
  }
  cp_async_wait<0>();
  if (soft_key == 0) {
    sh.m[soft_row] = m_run;
    sh.l[soft_row] = l_run;
  }
  __syncthreads();
#pragma unroll
  for (int j = 0; j < kWarpTiles; ++j) {
    // fp8: tile j holds chunk j / 2's dims of parity j % 2, its columns 2t, 2t + 1 dims 4t and 4t + 2.
    const int d = warp * kWarpDims + (kFp8 ? j / 2 * 16 + 4 * t + j % 2 : j * 8 + 2 * t);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int row = g + (i / 2) * 8;
      const int dim = d + (kFp8 ? 2 : 1) * (i % 2);
      const float sum = scales != nullptr ? o[j][i] * scales[dim] : o[j][i];
      write_decode_result(a, split, token, head0 + row, dim, sum, sh.m[row], sh.l[row]);
    }
  }
}

template <typename T>
void configure() {
  static const bool configured = [] {
    DI_CUDA_CHECK(cudaFuncSetAttribute(mla_decode_kernel<T>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       static_cast<int>(sizeof(Shared<T>))));
    return true;
  }();
  (void)configured;
}

template <typename T>
int32_t resident_blocks() {
  static const int32_t blocks = [] {
    configure<T>();
    int count = 0;
    DI_CUDA_CHECK(
        cudaOccupancyMaxActiveBlocksPerMultiprocessor(&count, mla_decode_kernel<T>, kThreads, sizeof(Shared<T>)));
    return static_cast<int32_t>(count);
  }();
  return blocks;
}

template <typename T>
void launch(const AttentionArgs& args, cudaStream_t stream) {
  configure<T>();
  const dim3 grid(static_cast<unsigned>(args.num_splits), static_cast<unsigned>(mla_decode_head_blocks(args.params)),
                  static_cast<unsigned>(args.batch.num_seqs));
  launch_dependent(mla_decode_kernel<T>, grid, dim3(kThreads), sizeof(Shared<T>), stream, args);
  DI_CUDA_CHECK_LAUNCH("mla_decode_kernel");
}

}  // namespace

bool mla_decode_fits(const AttentionParams& params) {
  return (params.cache_dtype == DType::kBF16 || params.cache_dtype == DType::kF8E4M3) && params.head_dim == kDims &&
         params.num_kv_heads == 1 && params.num_heads % kHeads == 0 && params.sliding_window == 0 &&
         params.sinks == nullptr;
}

// Head counts in multiples of 64 (DeepSeek-V3's 128) take the wgmma kernel, 64 heads a block
// (attention_decode_mla_wide.cu); others (DeepSeek-V2-Lite's 16) this one.
int32_t mla_decode_head_blocks(const AttentionParams& params) {
  return params.num_heads / (mla_wide_decode_fits(params) ? 64 : kHeads);
}

int32_t mla_decode_resident_blocks(const AttentionParams& params) {
  if (mla_wide_decode_fits(params)) return mla_wide_decode_resident_blocks();
  return params.cache_dtype == DType::kF8E4M3 ? resident_blocks<KvFp8>() : resident_blocks<__nv_bfloat16>();
}

void launch_mla_decode_attention(const AttentionArgs& args, cudaStream_t stream) {
  if (mla_wide_decode_fits(args.params)) return launch_mla_wide_decode_attention(args, stream);
  DI_CHECK(mla_decode_fits(args.params) && args.k_cache == args.v_cache && !args.cluster_combine,
           "the MLA decode kernel takes one bf16 or fp8 latent head of "
               << kDims << " dims shared by keys and values, heads in groups of " << kHeads);
  if (args.params.cache_dtype == DType::kF8E4M3) return launch<KvFp8>(args, stream);
  launch<__nv_bfloat16>(args, stream);
}

}  // namespace deepinfer::kernels::cuda::detail
