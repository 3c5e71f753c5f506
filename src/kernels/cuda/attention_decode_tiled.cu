// Decode attention over bf16 caches, tiled: a block serves one (split, KV head, sequence) and all
// the query heads of that KV head; its keys stream through a 4-stage cp.async ring of tiles (K and
// V of 4096 / head_dim keys, 16 KB) in shared memory, so three tiles per block stay in flight.
#include <cmath>

#include "core/check.h"

#include "kernels/cuda/attention_internal.cuh"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/dependent_launch.cuh"

namespace deepinfer::kernels::cuda::detail {
namespace {

constexpr int kThreads = kWarps * 32;
constexpr int kStages = 4;

// Sizes of the kernel for kDims dims per head. Scores: a thread takes one key of the tile and
// kTile / kThreads of its dims (a "part"), reading the key row from shared memory; rows are padded
// by 16 bytes so the lanes' 16-byte reads of 32 consecutive rows hit distinct banks. P.V: a
// thread takes one 16-byte chunk (8 dims) of every kGroups-th key of the tile, for all rows.
template <int kDims, int kRows>
struct Tiled {
  static constexpr int kTile = 4096 / kDims;  // keys per tile: 16 KB of K and V
  static constexpr int kChunks = kDims / 8;   // 16-byte chunks of a bf16 row
  static constexpr int kRowVec = kChunks + 1;
  static constexpr int kStageVec = 2 * kTile * kRowVec;  // K rows, then V rows
  static constexpr int kParts = kThreads / kTile;
  static constexpr int kPartChunks = kChunks / kParts;
  static constexpr int kGroups = kThreads / kChunks;
  static constexpr int kCopies = kTile * kChunks / kThreads;
  static constexpr int kRowsPerWarp = kRows / kWarps;
  static constexpr int kLaneKeys = (kTile + 31) / 32;
  static constexpr int kRingFloats = kStages * kStageVec * 4;
  // After the loop the ring holds the key groups' accumulators.
  static_assert(kGroups * kRows * kDims <= kRingFloats, "the group merge must fit the ring");
  static_assert(kRows % kWarps == 0 && kPartChunks * kParts == kChunks && kCopies * kThreads == kTile * kChunks);
  static constexpr size_t kSharedBytes =
      sizeof(float) * (size_t{kRingFloats} + kRows * kDims + kParts * kRows * kTile + kTile * kRows + 3 * kRows);
};

template <int kDims, int kRows>
__global__ void __launch_bounds__(kThreads) tiled_decode_kernel(AttentionArgs a) {
  wait_for_previous_grid();
  allow_next_grid();
  using S = Tiled<kDims, kRows>;
  constexpr int kTile = S::kTile;
  constexpr int kChunks = S::kChunks;
  constexpr int kRowVec = S::kRowVec;
  extern __shared__ float4 shared_raw[];
  float4* ring = shared_raw;
  float* q_tile = reinterpret_cast<float*>(ring + kStages * S::kStageVec);  // [kRows, kDims], pre-scaled
  float* scores = q_tile + kRows * kDims;                                     // [kParts, kRows, kTile]
  float* probs = scores + S::kParts * kRows * kTile;                          // [kTile, kRows]
  float* alphas = probs + kTile * kRows;                                      // [kRows]
  float* row_m = alphas + kRows;
  float* row_l = row_m + kRows;

  const auto [decode, seq, token, split, kv_head, group, key_begin, key_end] = decode_block(a);
  if (!decode) return;
  const int32_t num_heads = a.params.num_heads;
  const int32_t num_tiles = key_end > key_begin ? (key_end - key_begin + kTile - 1) / kTile : 0;

  const int tid = static_cast<int>(threadIdx.x);
  const int warp = tid / 32;
  const int lane = tid % 32;
  const int64_t cache_row = static_cast<int64_t>(a.params.num_kv_heads) * kDims;
  const int32_t* blocks = a.batch.block_table + static_cast<int64_t>(seq) * a.batch.max_blocks_per_seq;
  const int32_t block_size = a.batch.block_size;
  const int32_t block_shift = (block_size & (block_size - 1)) == 0 ? __ffs(block_size) - 1 : -1;
  const auto* k_head = static_cast<const __nv_bfloat16*>(a.k_cache) + static_cast<int64_t>(kv_head) * kDims;
  const auto* v_head = static_cast<const __nv_bfloat16*>(a.v_cache) + static_cast<int64_t>(kv_head) * kDims;
  // Each key's row is looked up on its own, so any page size works. Every call commits a group
  // (empty past the last tile), so the wait count below stays exact.
  const auto issue = [&](int32_t n) {
    if (n < num_tiles) {
      float4* stage = ring + (n % kStages) * S::kStageVec;
#pragma unroll
      for (int i = 0; i < S::kCopies; ++i) {
        const int idx = tid + i * kThreads;
        const int key = idx / kChunks;
        const int c = idx % kChunks;
        const int32_t pos = key_begin + n * kTile + key;
        const bool valid = pos < key_end;
        int64_t offset = 0;
        if (valid) {
          const int32_t page = block_shift >= 0 ? pos >> block_shift : pos / block_size;
          offset = (static_cast<int64_t>(blocks[page]) * block_size + (pos - page * block_size)) * cache_row + c * 8;
        }
        cp_async16(stage + key * kRowVec + c, k_head + offset, valid);
        cp_async16(stage + (kTile + key) * kRowVec + c, v_head + offset, valid);
      }
    }
    cp_async_commit();
  };
#pragma unroll
  for (int n = 0; n < kStages - 1; ++n) issue(n);

  const float q_scale = a.params.scale * kLog2e;
  for (int i = tid; i < kRows * kDims; i += kThreads) {
    const int r = i / kDims;
    float value = 0.0f;
    if (r < group) value = a.q[(static_cast<int64_t>(token) * num_heads + kv_head * group + r) * kDims + i % kDims] * q_scale;
    q_tile[i] = value;
  }

  const int qk_key = tid % kTile;
  const int part = tid / kTile;
  const int chunk = tid % kChunks;
  const int key_group = tid / kChunks;
  float m_run[S::kRowsPerWarp];
  float l_run[S::kRowsPerWarp];
#pragma unroll
  for (int j = 0; j < S::kRowsPerWarp; ++j) {
    m_run[j] = -INFINITY;
    l_run[j] = 0.0f;
  }
  float acc[kRows][8];
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
#pragma unroll
    for (int i = 0; i < 8; ++i) acc[r][i] = 0.0f;
  }
  const auto* bf16_tag = static_cast<const __nv_bfloat16*>(nullptr);

  for (int32_t n = 0; n < num_tiles; ++n) {
    cp_async_wait<kStages - 2>();
    __syncthreads();  // tile n landed for every thread, and all are done with tile n - 1's stage
    issue(n + kStages - 1);
    const float4* k_rows = ring + (n % kStages) * S::kStageVec;
    const float4* v_rows = k_rows + kTile * kRowVec;
    const int32_t tile_begin = key_begin + n * kTile;

    // Partial scores: this thread's key, its part of the dims.
    float s[kRows];
#pragma unroll
    for (int r = 0; r < kRows; ++r) s[r] = 0.0f;
#pragma unroll
    for (int j = 0; j < S::kPartChunks; ++j) {
      const int c = part * S::kPartChunks + j;
      float k[8];
      unpack16(k_rows[qk_key * kRowVec + c], bf16_tag, k);
#pragma unroll
      for (int r = 0; r < kRows; ++r) {
        const float4 q0 = *reinterpret_cast<const float4*>(q_tile + r * kDims + c * 8);
        const float4 q1 = *reinterpret_cast<const float4*>(q_tile + r * kDims + c * 8 + 4);
        float dot = s[r];
        dot = __fmaf_rn(q0.x, k[0], dot);
        dot = __fmaf_rn(q0.y, k[1], dot);
        dot = __fmaf_rn(q0.z, k[2], dot);
        dot = __fmaf_rn(q0.w, k[3], dot);
        dot = __fmaf_rn(q1.x, k[4], dot);
        dot = __fmaf_rn(q1.y, k[5], dot);
        dot = __fmaf_rn(q1.z, k[6], dot);
        dot = __fmaf_rn(q1.w, k[7], dot);
        s[r] = dot;
      }
    }
#pragma unroll
    for (int r = 0; r < kRows; ++r) scores[(part * kRows + r) * kTile + qk_key] = s[r];
    __syncthreads();

    // Online softmax: warp w owns rows w, w + kWarps; its lanes take the tile's keys.
#pragma unroll
    for (int j = 0; j < S::kRowsPerWarp; ++j) {
      const int r = warp + j * kWarps;
      float x[S::kLaneKeys];
      float m_tile = -INFINITY;
#pragma unroll
      for (int i = 0; i < S::kLaneKeys; ++i) {
        const int key = lane + 32 * i;
        x[i] = -INFINITY;
        if (key < kTile && tile_begin + key < key_end) {
          float sum = 0.0f;
#pragma unroll
          for (int p = 0; p < S::kParts; ++p) sum += scores[(p * kRows + r) * kTile + key];
          x[i] = sum;
        }
        m_tile = fmaxf(m_tile, x[i]);
      }
#pragma unroll
      for (int offset = 16; offset > 0; offset >>= 1) m_tile = fmaxf(m_tile, __shfl_xor_sync(0xffffffffu, m_tile, offset));
      // A tile's first key is always visible, so m_new is finite.
      const float m_new = fmaxf(m_run[j], m_tile);
      const float alpha = exp2f(m_run[j] - m_new);
      float p_sum = 0.0f;
#pragma unroll
      for (int i = 0; i < S::kLaneKeys; ++i) {
        const int key = lane + 32 * i;
        const float p = exp2f(x[i] - m_new);
        if (key < kTile) probs[key * kRows + r] = p;
        p_sum += p;
      }
#pragma unroll
      for (int offset = 16; offset > 0; offset >>= 1) p_sum += __shfl_xor_sync(0xffffffffu, p_sum, offset);
      l_run[j] = __fmaf_rn(l_run[j], alpha, p_sum);
      m_run[j] = m_new;
      if (lane == 0) alphas[r] = alpha;
    }
    __syncthreads();

    // P.V for this thread's chunk over its keys; keys past key_end have p = 0 and zero values.
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      const float alpha = alphas[r];
#pragma unroll
      for (int i = 0; i < 8; ++i) acc[r][i] *= alpha;
    }
#pragma unroll
    for (int j = 0; j < kTile / S::kGroups; ++j) {
      const int key = key_group + j * S::kGroups;
      float v[8];
      unpack16(v_rows[key * kRowVec + chunk], bf16_tag, v);
#pragma unroll
      for (int r4 = 0; r4 < kRows; r4 += 4) {
        const float4 p = *reinterpret_cast<const float4*>(probs + key * kRows + r4);
#pragma unroll
        for (int i = 0; i < 8; ++i) {
          acc[r4][i] = __fmaf_rn(p.x, v[i], acc[r4][i]);
          acc[r4 + 1][i] = __fmaf_rn(p.y, v[i], acc[r4 + 1][i]);
          acc[r4 + 2][i] = __fmaf_rn(p.z, v[i], acc[r4 + 2][i]);
          acc[r4 + 3][i] = __fmaf_rn(p.w, v[i], acc[r4 + 3][i]);
        }
      }
    }
  }
  cp_async_wait<0>();
  __syncthreads();  // the ring is free: it now takes each key group's accumulators

  float* merged = reinterpret_cast<float*>(ring);  // [kGroups, kRows, kDims]
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    float* dst = merged + (key_group * kRows + r) * kDims + chunk * 8;
    *reinterpret_cast<float4*>(dst) = make_float4(acc[r][0], acc[r][1], acc[r][2], acc[r][3]);
    *reinterpret_cast<float4*>(dst + 4) = make_float4(acc[r][4], acc[r][5], acc[r][6], acc[r][7]);
  }
  if (lane == 0) {
#pragma unroll
    for (int j = 0; j < S::kRowsPerWarp; ++j) {
      row_m[warp + j * kWarps] = m_run[j];
      row_l[warp + j * kWarps] = l_run[j];
    }
  }
  __syncthreads();

  // Key groups summed in group order: every group saw the same running max, so no rescaling.
  for (int i = tid; i < group * kDims; i += kThreads) {
    const int r = i / kDims;
    const int d = i % kDims;
    float sum = 0.0f;
#pragma unroll
    for (int g = 0; g < S::kGroups; ++g) sum += merged[(g * kRows + r) * kDims + d];
    const float m_all = row_m[r];
    float denom = row_l[r];
    const int32_t head = kv_head * group + r;
    write_decode_result(a, split, token, head, d, sum, m_all, denom);
  }
}

template <int kDims, int kRows>
void configure() {
  static const bool configured = [] {
    DI_CUDA_CHECK(cudaFuncSetAttribute(tiled_decode_kernel<kDims, kRows>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       static_cast<int>(Tiled<kDims, kRows>::kSharedBytes)));
    return true;
  }();
  (void)configured;
}

template <int kDims, int kRows>
void launch(const AttentionArgs& args, cudaStream_t stream) {
  configure<kDims, kRows>();
  const dim3 grid(static_cast<unsigned>(args.num_splits), static_cast<unsigned>(args.params.num_kv_heads),
                  static_cast<unsigned>(args.batch.num_seqs));
  launch_dependent(tiled_decode_kernel<kDims, kRows>, grid, dim3(kThreads), Tiled<kDims, kRows>::kSharedBytes, stream,
                   args);
  DI_CUDA_CHECK_LAUNCH("tiled_decode_kernel");
}

template <int kDims, int kRows>
int32_t resident_blocks() {
  static const int32_t blocks = [] {
    configure<kDims, kRows>();
    int count = 0;
    DI_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&count, tiled_decode_kernel<kDims, kRows>, kThreads,
                                                                Tiled<kDims, kRows>::kSharedBytes));
    return static_cast<int32_t>(count);
  }();
  return blocks;
}

template <int kRows>
void launch_for_dims(const AttentionArgs& args, cudaStream_t stream) {
  switch (args.params.head_dim) {
    case 64: return launch<64, kRows>(args, stream);
    case 128: return launch<128, kRows>(args, stream);
    default: return launch<256, kRows>(args, stream);
  }
}

template <int kRows>
int32_t resident_blocks_for_dims(int32_t head_dim) {
  switch (head_dim) {
    case 64: return resident_blocks<64, kRows>();
    case 128: return resident_blocks<128, kRows>();
    default: return resident_blocks<256, kRows>();
  }
}

}  // namespace

bool tiled_decode_fits(const AttentionParams& params) {
  const int32_t group = params.num_heads / params.num_kv_heads;
  return params.cache_dtype == DType::kBF16 && group <= 8 &&
         (params.head_dim == 64 || params.head_dim == 128 || params.head_dim == 256);
}

int32_t tiled_decode_resident_blocks(const AttentionParams& params) {
  DI_CHECK(tiled_decode_fits(params), "head_dim " << params.head_dim << ", heads " << params.num_heads << "/"
                                                  << params.num_kv_heads);
  if (params.num_heads / params.num_kv_heads <= 4) return resident_blocks_for_dims<4>(params.head_dim);
  return resident_blocks_for_dims<8>(params.head_dim);
}

void launch_tiled_decode_attention(const AttentionArgs& args, cudaStream_t stream) {
  DI_CHECK(tiled_decode_fits(args.params), "head_dim " << args.params.head_dim << ", heads " << args.params.num_heads
                                                       << "/" << args.params.num_kv_heads);
  if (args.params.num_heads / args.params.num_kv_heads <= 4) return launch_for_dims<4>(args, stream);
  launch_for_dims<8>(args, stream);
}

}  // namespace deepinfer::kernels::cuda::detail
