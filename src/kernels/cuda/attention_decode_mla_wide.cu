// Decode attention over MLA's bf16 latent cache for 64 query heads a block (DeepSeek-V3's 128 heads
// run as two blocks), on Hopper's warpgroup products (wgmma, sm_90a). One latent head of 576 dims
// (512 latent + 64 rope) is both key and value, so each 64-key tile of it is read into shared memory
// once for 64 heads. A block serves one (split, 64 heads, sequence) with three warpgroups, in two
// phases a tile:
//   - warpgroup 0 takes the scores S = q K^T of the 64 heads x 64 keys (q from shared memory, in the
//     tiles' layout), the online softmax (one head's row per 4 lanes), and writes p (bf16) and each
//     row's rescale factor to shared memory; meanwhile warpgroups 1 and 2 start the next tile's
//     copies into the other stage of a 2-stage cp.async ring;
//   - then the three take p V together, each over its own dims: warpgroup 0 dims [0, 64), 1 dims
//     [64, 320), 2 dims [320, 576), each keeping those accumulators in registers for the whole split.
// Tiles and q sit in shared memory as 64-dim column blocks of 128-byte rows in the 128-byte swizzle
// (wgmma_util.cuh): K-major for q.k, N-major (keys as k) for p.v, the same bytes. A thread's proxy
// fence (making its shared-memory writes visible to the tensor cores) also waits for its copies in
// flight, so the fences fall where the fencing threads have none: warpgroup 0 copies nothing, and
// warpgroups 1 and 2 fence only once their copies have landed. q and p enter the products rounded
// to bf16, as in FlashMLA and the 16-head kernel (attention_decode_mla.cu). Splits write the
// partials that combine_splits_kernel merges, or the normalised output when there is one.
#include <cmath>
#include <cstdlib>

#include "core/check.h"

#include "kernels/cuda/attention_internal.cuh"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/dependent_launch.cuh"
#include "kernels/cuda/mma_util.cuh"
#include "kernels/cuda/wgmma_util.cuh"

namespace deepinfer::kernels::cuda::detail {
namespace {

constexpr int kDims = 576;
constexpr int kHeads = 64;  // query heads per block: wgmma's 64 rows
constexpr int kTileKeys = 64;
constexpr int kGroupThreads = 128;  // a warpgroup
constexpr int kThreads = 3 * kGroupThreads;
constexpr int kCopyThreads = kThreads - kGroupThreads;   // warpgroups 1 and 2 copy the tiles
constexpr int kRowBytes = 128;                           // 64 bf16 of one row in one column block
constexpr int kColumnBlocks = kDims / 64;                // 9
constexpr int kColumnBytes = 64 * kRowBytes;             // a column block of 64 rows (heads or keys)
constexpr int kTileBytes = kColumnBlocks * kColumnBytes;  // 73728
constexpr int kThreadsPerKey = kCopyThreads / kTileKeys;  // 4
constexpr int kScoreSteps = kDims / 16;                   // k-steps of q.k: 36
constexpr int kValueSteps = kTileKeys / 16;               // k-steps of p.v: 4
constexpr int kQVec = kHeads * kDims / 4;                 // float4 of the block's q rows
// Shared memory from a 1024-byte aligned base: q, the two tile stages, p (one 128-byte row per
// head), then each row's rescale factor and final max and denominator.
constexpr int kQOffset = 0;
constexpr int kStageOffset = kTileBytes;
constexpr int kPOffset = 3 * kTileBytes;
constexpr int kAlphaOffset = kPOffset + kHeads * kRowBytes;
constexpr int kMOffset = kAlphaOffset + kHeads * 4;
constexpr int kLOffset = kMOffset + kHeads * 4;
constexpr int kSharedBytes = kLOffset + kHeads * 4 + 1024;  // + the base's alignment
static_assert(kThreadsPerKey * kTileKeys == kCopyThreads && 8 % kThreadsPerKey == 0, "copy split");
static_assert(kQVec % kThreads == 0, "q copy split");

// Every thread of the block; ids 1 and 2, not the __syncthreads barrier.
__device__ __forceinline__ void block_barrier(int id) { named_barrier_sync<kThreads>(id); }

// What every warpgroup needs: the block's work and the shared layout.
struct Block {
  const AttentionArgs* a;
  int32_t token, split, head0, key_begin, key_end, num_tiles;
  char* shared;   // generic address of the aligned base
  uint32_t base;  // its shared-window address

  __device__ uint32_t stage(int32_t n) const { return base + kStageOffset + (n % 2) * kTileBytes; }
  __device__ float* row_stats(int offset) const { return reinterpret_cast<float*>(shared + offset); }
};

// A copying thread's share of the tiles: chunks kThreadsPerKey * k + part (k = 0, 1) of each column
// block of key `key`, so a key's four threads read 64 contiguous bytes at a time and the offsets past
// one base are constants but two. Every issue commits a group (empty past the last tile).
struct TileCopier {
  const __nv_bfloat16* cache;
  PageTable pages;
  int key, part;

  __device__ int64_t row_of(const Block& b, int32_t n) const {
    const int32_t pos = b.key_begin + n * kTileKeys + key;
    return n < b.num_tiles && pos < b.key_end ? pages.row_offset(pos) : -1;
  }
  __device__ void issue(const Block& b, int32_t n, int64_t row) const {
    if (n < b.num_tiles) {
      char* dst = b.shared + kStageOffset + (n % 2) * kTileBytes + key * kRowBytes;
      const __nv_bfloat16* src = cache + (row >= 0 ? row : 0) + part * 8;
#pragma unroll
      for (int k = 0; k < 8 / kThreadsPerKey; ++k) {
        const int chunk = kThreadsPerKey * k;
        const int slot = ((chunk + part) ^ (key & 7)) << 4;
#pragma unroll
        for (int block = 0; block < kColumnBlocks; ++block) {
          cp_async16(dst + block * kColumnBytes + slot, src + (8 * block + chunk) * 8, row >= 0);
        }
      }
    }
    cp_async_commit();
  }
};

// Writes a warpgroup's accumulators of dims [dim0, dim0 + 8 * kTiles) once m and l are in shared
// memory: write_decode_result's values (no sinks here), two dims at a time where the buffers allow.
template <int kTiles>
__device__ __forceinline__ void write_rows(const Block& b, const float (&o)[4 * kTiles], int dim0) {
  const AttentionArgs& a = *b.a;
  const int lane = static_cast<int>(threadIdx.x % 32);
  const int row = static_cast<int>(threadIdx.x / 32 % 4) * 16 + lane / 4;
  const float* m = b.row_stats(kMOffset);
  const float* l = b.row_stats(kLOffset);
  const bool pairs = ((reinterpret_cast<uintptr_t>(a.out) | reinterpret_cast<uintptr_t>(a.partial)) & 7) == 0;
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int r = row + half * 8;
    const int32_t head = b.head0 + r;
    float* dst = a.write_partials ? partial_row(a, b.split, b.token, head)
                                  : a.out + (static_cast<int64_t>(b.token) * a.params.num_heads + head) * kDims;
    const float scale = a.write_partials ? 1.0f : 1.0f / l[r];
    if (a.write_partials && dim0 == 0 && lane % 4 == 0) {
      dst[kDims] = m[r];
      dst[kDims + 1] = l[r];
    }
#pragma unroll
    for (int j = 0; j < kTiles; ++j) {
      const int d = dim0 + 8 * j + 2 * (lane % 4);
      const float x0 = o[4 * j + 2 * half] * scale;
      const float x1 = o[4 * j + 2 * half + 1] * scale;
      if (pairs) {
        *reinterpret_cast<float2*>(dst + d) = make_float2(x0, x1);
      } else {
        dst[d] = x0;
        dst[d + 1] = x1;
      }
    }
  }
}

// Warpgroup 0: scores, softmax, p, and p.v over dims [0, 64).
__device__ void scores_group(const Block& b) {
  const int lane = static_cast<int>(threadIdx.x % 32);
  const int g = lane / 4;
  const int t = lane % 4;
  const int row_lo = static_cast<int>(threadIdx.x / 32) * 16 + g;  // rows row_lo and row_lo + 8
  float m_lo = -INFINITY, m_hi = -INFINITY;                         // log2 units
  float l_lo = 0.0f, l_hi = 0.0f;
  float o[32];
#pragma unroll
  for (int i = 0; i < 32; ++i) o[i] = 0.0f;
  float* alpha = b.row_stats(kAlphaOffset);
  char* p_rows = b.shared + kPOffset;

  for (int32_t n = 0; n < b.num_tiles; ++n) {
    fence_async_shared();  // (q's rows, before the first tile)
    block_barrier(1);      // tile n is in place; every warpgroup is done with tile n - 1 (its stage, p)
    const uint64_t tile_desc = wgmma_descriptor(b.stage(n), 16);
    // Rebuilt each tile from an opaque copy, so the compiler keeps one q descriptor, not 36 hoisted ones.
    uint64_t q_desc = wgmma_descriptor(b.base + kQOffset, 16);
    asm volatile("" : "+l"(q_desc));

    float s[32];
#pragma unroll
    for (int i = 0; i < 32; ++i) s[i] = 0.0f;
    wgmma_pin(s);
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < kScoreSteps; ++kk) {
      const uint32_t at = ((kk / 4) * kColumnBytes + (kk % 4) * 32) >> 4;
      wgmma_m64n64k16<0>(s, q_desc + at, tile_desc + at, kk > 0);
    }
    wgmma_commit();
    wgmma_wait<0>();
    wgmma_pin(s);

    // Keys past the split's end score -inf; the tile's first key is visible, so each max is finite.
    const int32_t visible = b.key_end - (b.key_begin + n * kTileKeys);
    float x_lo = -INFINITY, x_hi = -INFINITY;
#pragma unroll
    for (int j = 0; j < 8; ++j) {
#pragma unroll
      for (int e = 0; e < 2; ++e) {
        if (8 * j + 2 * t + e >= visible) {
          s[4 * j + e] = -INFINITY;
          s[4 * j + 2 + e] = -INFINITY;
        }
        x_lo = fmaxf(x_lo, s[4 * j + e]);
        x_hi = fmaxf(x_hi, s[4 * j + 2 + e]);
      }
    }
#pragma unroll
    for (int offset = 1; offset < 4; offset <<= 1) {
      x_lo = fmaxf(x_lo, __shfl_xor_sync(0xffffffffu, x_lo, offset));
      x_hi = fmaxf(x_hi, __shfl_xor_sync(0xffffffffu, x_hi, offset));
    }
    const float new_lo = fmaxf(m_lo, x_lo);
    const float new_hi = fmaxf(m_hi, x_hi);
    const float alpha_lo = exp2f(m_lo - new_lo);
    const float alpha_hi = exp2f(m_hi - new_hi);
    m_lo = new_lo;
    m_hi = new_hi;
    float sum_lo = 0.0f, sum_hi = 0.0f;
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      const float p0 = exp2f(s[4 * j] - new_lo);
      const float p1 = exp2f(s[4 * j + 1] - new_lo);
      const float p2 = exp2f(s[4 * j + 2] - new_hi);
      const float p3 = exp2f(s[4 * j + 3] - new_hi);
      sum_lo += p0 + p1;
      sum_hi += p2 + p3;
      // p as p.v's A operand: row r's keys 8j..8j+7 in chunk j ^ (r % 8); rows r and r + 8 share r % 8.
      const uint32_t at = ((j ^ g) << 4) + 4 * t;
      *reinterpret_cast<uint32_t*>(p_rows + row_lo * kRowBytes + at) = pack_bf16(p0, p1);
      *reinterpret_cast<uint32_t*>(p_rows + (row_lo + 8) * kRowBytes + at) = pack_bf16(p2, p3);
    }
#pragma unroll
    for (int offset = 1; offset < 4; offset <<= 1) {
      sum_lo += __shfl_xor_sync(0xffffffffu, sum_lo, offset);
      sum_hi += __shfl_xor_sync(0xffffffffu, sum_hi, offset);
    }
    l_lo = l_lo * alpha_lo + sum_lo;
    l_hi = l_hi * alpha_hi + sum_hi;
    if (t == 0) {
      alpha[row_lo] = alpha_lo;
      alpha[row_lo + 8] = alpha_hi;
    }
#pragma unroll
    for (int j = 0; j < 8; ++j) {
      o[4 * j] *= alpha_lo;
      o[4 * j + 1] *= alpha_lo;
      o[4 * j + 2] *= alpha_hi;
      o[4 * j + 3] *= alpha_hi;
    }
    fence_async_shared();
    block_barrier(2);  // p and the rescale factors are in place

    const uint64_t p_desc = wgmma_descriptor(b.base + kPOffset, 16);
    const uint64_t v_desc = wgmma_descriptor(b.stage(n), kColumnBytes);
    wgmma_pin(o);
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < kValueSteps; ++kk) wgmma_m64n64k16<1>(o, p_desc + kk * 2, v_desc + kk * 128, 1);
    wgmma_commit();
    wgmma_wait<0>();
    wgmma_pin(o);
  }
  if (t == 0) {
    b.row_stats(kMOffset)[row_lo] = m_lo;
    b.row_stats(kMOffset)[row_lo + 8] = m_hi;
    b.row_stats(kLOffset)[row_lo] = l_lo;
    b.row_stats(kLOffset)[row_lo + 8] = l_hi;
  }
  block_barrier(1);
  write_rows<8>(b, o, 0);
}

// Warpgroups 1 and 2: the tile copies, and p.v over dims [64 + 256 (group - 1), + 256).
__device__ void values_group(const Block& b, const TileCopier& copier, int group) {
  const int lane = static_cast<int>(threadIdx.x % 32);
  const int row_lo = static_cast<int>(threadIdx.x / 32 % 4) * 16 + lane / 4;
  const int dim0 = 64 + 256 * (group - 1);
  float o[128];
#pragma unroll
  for (int i = 0; i < 128; ++i) o[i] = 0.0f;
  const float* alpha = b.row_stats(kAlphaOffset);
  int64_t next_row = copier.row_of(b, 1);

  for (int32_t n = 0; n < b.num_tiles; ++n) {
    cp_async_wait<0>();    // this thread's copies of tile n have landed (none stay in flight)
    fence_async_shared();  // ... and, like q's rows, are visible to the tensor cores
    block_barrier(1);
    copier.issue(b, n + 1, next_row);  // into the stage tile n - 1 used
    next_row = copier.row_of(b, n + 2);
    uint64_t p_desc = wgmma_descriptor(b.base + kPOffset, 16);
    asm volatile("" : "+l"(p_desc));
    const uint64_t v_desc = wgmma_descriptor(b.stage(n) + (dim0 / 64) * kColumnBytes, kColumnBytes);
    block_barrier(2);  // warpgroup 0 has written p and the rescale factors
    const float alpha_lo = alpha[row_lo];
    const float alpha_hi = alpha[row_lo + 8];
#pragma unroll
    for (int j = 0; j < 32; ++j) {
      o[4 * j] *= alpha_lo;
      o[4 * j + 1] *= alpha_lo;
      o[4 * j + 2] *= alpha_hi;
      o[4 * j + 3] *= alpha_hi;
    }
    wgmma_pin(o);
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < kValueSteps; ++kk) wgmma_m64n256k16<1>(o, p_desc + kk * 2, v_desc + kk * 128, 1);
    wgmma_commit();
    wgmma_wait<0>();
    wgmma_pin(o);
  }
  cp_async_wait<0>();
  block_barrier(1);  // warpgroup 0 has written each row's max and denominator
  write_rows<32>(b, o, dim0);
}

__global__ void __launch_bounds__(kThreads, 1) mla_wide_decode_kernel(AttentionArgs a) {
  extern __shared__ __align__(1024) char shared_raw[];
  wait_for_previous_grid();
  allow_next_grid();
  const auto [decode, seq, token, split, head_block, group, key_begin, key_end] = decode_block(a);
  (void)group;
  if (!decode) return;
  const int tid = static_cast<int>(threadIdx.x);
  Block b;
  b.a = &a;
  b.token = token;
  b.split = split;
  b.head0 = head_block * kHeads;
  b.key_begin = key_begin;
  b.key_end = key_end;
  b.num_tiles = key_end > key_begin ? (key_end - key_begin + kTileKeys - 1) / kTileKeys : 0;
  const uint32_t raw = shared_address(shared_raw);
  b.base = (raw + 1023) & ~1023u;
  b.shared = shared_raw + (b.base - raw);
  TileCopier copier{static_cast<const __nv_bfloat16*>(a.k_cache), page_table(a, seq, kDims),
                    (tid - kGroupThreads) / kThreadsPerKey, (tid - kGroupThreads) % kThreadsPerKey};
  if (tid >= kGroupThreads) copier.issue(b, 0, copier.row_of(b, 0));

  // q of the block's heads, pre-scaled into log2 units, as bf16 in the tiles' layout.
  const float q_scale = a.params.scale * kLog2e;
  const auto* q_rows =
      reinterpret_cast<const float4*>(a.q + (static_cast<int64_t>(token) * a.params.num_heads + b.head0) * kDims);
#pragma unroll 4
  for (int i = tid; i < kQVec; i += kThreads) {
    const float4 x = q_rows[i];
    const int head = i / (kDims / 4);
    const int c = i % (kDims / 4) / 2;  // 16-byte chunk of the row
    const uint32_t at = (c >> 3) * kColumnBytes + head * kRowBytes + (((c & 7) ^ (head & 7)) << 4) + (i % 2) * 8;
    const uint2 packed = make_uint2(pack_bf16(x.x * q_scale, x.y * q_scale), pack_bf16(x.z * q_scale, x.w * q_scale));
    *reinterpret_cast<uint2*>(b.shared + kQOffset + at) = packed;
  }
  // The first tile's fences and barrier publish q to the tensor cores.
  if (tid < kGroupThreads) {
    scores_group(b);
  } else {
    values_group(b, copier, tid / kGroupThreads);
  }
}

void configure() {
  static const bool configured = [] {
    DI_CUDA_CHECK(cudaFuncSetAttribute(mla_wide_decode_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       kSharedBytes));
    return true;
  }();
  (void)configured;
}

}  // namespace

bool mla_wide_decode_fits(const AttentionParams& params) {
  return params.cache_dtype == DType::kBF16 && mla_decode_fits(params) && params.num_heads % kHeads == 0;
}

int32_t mla_wide_decode_resident_blocks() {
  static const int32_t blocks = [] {
    configure();
    int count = 0;
    DI_CUDA_CHECK(
        cudaOccupancyMaxActiveBlocksPerMultiprocessor(&count, mla_wide_decode_kernel, kThreads, kSharedBytes));
    return static_cast<int32_t>(count);
  }();
  return blocks;
}

void launch_mla_wide_decode_attention(const AttentionArgs& args, cudaStream_t stream) {
  DI_CHECK(mla_wide_decode_fits(args.params) && args.k_cache == args.v_cache && !args.cluster_combine,
           "the wide MLA decode kernel takes one bf16 latent head of "
               << kDims << " dims shared by keys and values, heads in groups of " << kHeads);
  configure();
  const dim3 grid(static_cast<unsigned>(args.num_splits), static_cast<unsigned>(args.params.num_heads / kHeads),
                  static_cast<unsigned>(args.batch.num_seqs));
  launch_dependent(mla_wide_decode_kernel, grid, dim3(kThreads), kSharedBytes, stream, args);
  DI_CUDA_CHECK_LAUNCH("mla_wide_decode_kernel");
}

}  // namespace deepinfer::kernels::cuda::detail
