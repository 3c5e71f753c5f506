// Decode attention (one new token per sequence): a block serves one (split, KV head, sequence)
// and all the query heads of that KV head, so each K/V page is read from HBM once per step. Its
// warps take turns over passes of a few keys; within a warp, a group of lanes owns one key of the
// pass (each lane 16 of its dims), so scores need only a short shuffle reduction and the values
// are used by the lanes that loaded them: nothing is shared between lanes but the query rows.
// Each lane streams its own K/V slices through a 4-stage cp.async ring in shared memory, which
// keeps several passes in flight without spending registers on them. Lane groups and then warps
// merge their online softmax states in a fixed order.
#include <cmath>

#include "core/check.h"

#include "kernels/cuda/attention_internal.cuh"
#include "kernels/cuda/cuda_check.h"

namespace deepinfer::kernels::cuda::detail {
namespace {

constexpr int kStages = 4;
// One stage of one warp: K then V, each 4 chunks x 32 lanes of float4 (16 floats per lane).
constexpr int kStageVectors = 2 * 4 * 32;

template <int kDims, int kRows>
__global__ void __launch_bounds__(kWarps * 32) decode_attention_kernel(AttentionArgs a) {
  constexpr int kLanesPerKey = kDims / 16;
  constexpr int kKeysPerPass = 32 / kLanesPerKey;
  constexpr int kChunkStride = kDims / 4;  // a lane's 4 float4 chunks sit this many floats apart
  constexpr int kStateStride = kDims + 4;  // per row: acc, then m and l; float4-aligned rows
  constexpr int kWarpFloats = kStages * kStageVectors * 4;
  static_assert(kRows * kStateStride <= kWarpFloats, "a warp's final state must fit its stage ring");
  extern __shared__ float4 shared_raw[];
  float* q_tile = reinterpret_cast<float*>(shared_raw);  // [kRows, kDims], pre-scaled
  float4* rings = shared_raw + kRows * kDims / 4;         // [kWarps][kStages][kStageVectors]

  const int32_t seq = static_cast<int32_t>(blockIdx.z);
  const int32_t token = a.batch.query_start[seq];
  if (a.batch.query_start[seq + 1] - token != 1) return;
  const int32_t split = static_cast<int32_t>(blockIdx.x);
  const int32_t kv_head = static_cast<int32_t>(blockIdx.y);
  const int32_t num_heads = a.params.num_heads;
  const int32_t group = num_heads / a.params.num_kv_heads;
  const int32_t seq_len = a.batch.seq_len[seq];
  const int32_t window = a.params.sliding_window;
  // Every key in [key_begin, key_end) is visible: key_end <= seq_len, and the window start is
  // folded into key_begin.
  int32_t key_begin = split * a.split_keys;
  const int32_t key_end = min(key_begin + a.split_keys, seq_len);
  if (window > 0) key_begin = max(key_begin, seq_len - window);

  const int tid = static_cast<int>(threadIdx.x);
  const int warp = tid / 32;
  const int lane = tid % 32;
  const int sub = lane % kLanesPerKey;  // which 4 dims of each chunk this lane owns
  const int slot = lane / kLanesPerKey;  // which key of the pass
  float4* ring = rings + warp * kStages * kStageVectors;
  const int32_t num_passes = key_end > key_begin ? (key_end - key_begin + kKeysPerPass - 1) / kKeysPerPass : 0;
  const int32_t my_passes = num_passes > warp ? (num_passes - warp + kWarps - 1) / kWarps : 0;
  const int64_t cache_row = static_cast<int64_t>(a.params.num_kv_heads) * kDims;
  const int32_t* blocks = a.batch.block_table + static_cast<int64_t>(seq) * a.batch.max_blocks_per_seq;
  const int32_t block_size = a.batch.block_size;
  const float* k_base = a.k_cache + static_cast<int64_t>(kv_head) * kDims + sub * 4;
  const float* v_base = a.v_cache + static_cast<int64_t>(kv_head) * kDims + sub * 4;
  const auto pass_key = [&](int32_t n) { return key_begin + (warp + n * kWarps) * kKeysPerPass + slot; };
  // Every call commits a group (empty past the last pass), so the wait count below stays exact.
  const auto issue = [&](int32_t n) {
    if (n < my_passes) {
      const int32_t key = pass_key(n);
      const bool valid = key < key_end;
      int64_t offset = 0;
      if (valid) offset = (static_cast<int64_t>(blocks[key / block_size]) * block_size + key % block_size) * cache_row;
      float4* dst = ring + (n % kStages) * kStageVectors + lane;
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        cp_async16(dst + c * 32, k_base + offset + c * kChunkStride, valid);
        cp_async16(dst + 128 + c * 32, v_base + offset + c * kChunkStride, valid);
      }
    }
    cp_async_commit();
  };
#pragma unroll
  for (int n = 0; n < kStages - 1; ++n) issue(n);

  const float q_scale = a.params.scale * kLog2e;
  for (int i = tid; i < kRows * kDims; i += kWarps * 32) {
    const int r = i / kDims;
    float value = 0.0f;
    if (r < group) value = a.q[(static_cast<int64_t>(token) * num_heads + kv_head * group + r) * kDims + i % kDims] * q_scale;
    q_tile[i] = value;
  }
  __syncthreads();

  float m[kRows];
  float l[kRows];
  float acc[kRows][16];
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    m[r] = -INFINITY;
    l[r] = 0.0f;
#pragma unroll
    for (int i = 0; i < 16; ++i) acc[r][i] = 0.0f;
  }
  for (int32_t n = 0; n < my_passes; ++n) {
    issue(n + kStages - 1);
    cp_async_wait<kStages - 1>();  // this lane's copies of pass n have landed (it reads only those)
    const float4* stage = ring + (n % kStages) * kStageVectors + lane;
    float4 k[4];
#pragma unroll
    for (int c = 0; c < 4; ++c) k[c] = stage[c * 32];
    const bool visible = pass_key(n) < key_end;
    float s[kRows];
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      float dot = 0.0f;
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        const float4 qx = *reinterpret_cast<const float4*>(q_tile + r * kDims + c * kChunkStride + sub * 4);
        dot = __fmaf_rn(qx.w, k[c].w, __fmaf_rn(qx.z, k[c].z, __fmaf_rn(qx.y, k[c].y, __fmaf_rn(qx.x, k[c].x, dot))));
      }
#pragma unroll
      for (int offset = kLanesPerKey / 2; offset > 0; offset >>= 1) dot += __shfl_xor_sync(0xffffffffu, dot, offset);
      s[r] = visible ? dot : -INFINITY;
    }
    float v[16];
#pragma unroll
    for (int c = 0; c < 4; ++c) {
      const float4 x = stage[128 + c * 32];
      v[4 * c] = x.x;
      v[4 * c + 1] = x.y;
      v[4 * c + 2] = x.z;
      v[4 * c + 3] = x.w;
    }
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      const float m_new = fmaxf(m[r], s[r]);
      // Nothing seen yet keeps m = -inf; exp2 of (-inf) - (-inf) would be NaN.
      const float p = m_new == -INFINITY ? 0.0f : exp2f(s[r] - m_new);
      const float alpha = m_new == -INFINITY ? 1.0f : exp2f(m[r] - m_new);
      l[r] = __fmaf_rn(l[r], alpha, p);
      m[r] = m_new;
#pragma unroll
      for (int i = 0; i < 16; ++i) acc[r][i] = __fmaf_rn(p, v[i], acc[r][i] * alpha);
    }
  }
  cp_async_wait<0>();

  // Merge the warp's lane groups (they saw different keys); the lower group's state always comes
  // first, so partners compute the same bits.
#pragma unroll
  for (int offset = kLanesPerKey; offset < 32; offset *= 2) {
    const bool upper = (lane & offset) != 0;
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      const float m_other = __shfl_xor_sync(0xffffffffu, m[r], offset);
      const float l_other = __shfl_xor_sync(0xffffffffu, l[r], offset);
      const float m_new = fmaxf(m[r], m_other);
      const float scale_self = m_new == -INFINITY ? 0.0f : exp2f(m[r] - m_new);
      const float scale_other = m_new == -INFINITY ? 0.0f : exp2f(m_other - m_new);
      const float scale_lo = upper ? scale_other : scale_self;
      const float scale_hi = upper ? scale_self : scale_other;
      l[r] = upper ? __fmaf_rn(l_other, scale_lo, l[r] * scale_hi) : __fmaf_rn(l[r], scale_lo, l_other * scale_hi);
      m[r] = m_new;
#pragma unroll
      for (int i = 0; i < 16; ++i) {
        const float other = __shfl_xor_sync(0xffffffffu, acc[r][i], offset);
        acc[r][i] = upper ? __fmaf_rn(other, scale_lo, acc[r][i] * scale_hi)
                          : __fmaf_rn(acc[r][i], scale_lo, other * scale_hi);
      }
    }
  }
  // The warp's state goes into its own ring (its copies are done; other warps may still stream).
  __syncwarp();
  float* state = reinterpret_cast<float*>(ring);
  if (slot == 0) {
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
#pragma unroll
      for (int c = 0; c < 4; ++c) {
        *reinterpret_cast<float4*>(state + r * kStateStride + c * kChunkStride + sub * 4) =
            make_float4(acc[r][4 * c], acc[r][4 * c + 1], acc[r][4 * c + 2], acc[r][4 * c + 3]);
      }
      if (lane == 0) {
        state[r * kStateStride + kDims] = m[r];
        state[r * kStateStride + kDims + 1] = l[r];
      }
    }
  }
  __syncthreads();

  // Merge the warps in warp order, one (row, dim) per thread and step.
  const float* states = reinterpret_cast<const float*>(rings);
  for (int i = tid; i < group * kDims; i += kWarps * 32) {
    const int r = i / kDims;
    const int d = i % kDims;
    float m_all = -INFINITY;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) m_all = fmaxf(m_all, states[w * kWarpFloats + r * kStateStride + kDims]);
    float sum = 0.0f;
    float denom = 0.0f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) {
      const float* row = states + w * kWarpFloats + r * kStateStride;
      const float scale = m_all == -INFINITY ? 0.0f : exp2f(row[kDims] - m_all);
      sum = __fmaf_rn(row[d], scale, sum);
      denom = __fmaf_rn(row[kDims + 1], scale, denom);
    }
    const int32_t head = kv_head * group + r;
    if (a.write_partials) {
      float* dst = partial_row(a, split, token, head);
      dst[d] = sum;
      if (d == 0) {
        dst[kDims] = m_all;
        dst[kDims + 1] = denom;
      }
    } else {
      float rescale = 1.0f;
      if (a.params.sinks != nullptr) {
        const float sink = a.params.sinks[head] * kLog2e;
        const float m_sink = fmaxf(m_all, sink);
        rescale = exp2f(m_all - m_sink);
        denom = denom * rescale + exp2f(sink - m_sink);
      }
      a.out[(static_cast<int64_t>(token) * num_heads + head) * kDims + d] = sum * rescale / denom;
    }
  }
}

template <int kDims, int kRows>
void launch(const AttentionArgs& args, cudaStream_t stream) {
  constexpr size_t kSharedBytes = kRows * kDims * sizeof(float) + size_t{kWarps} * kStages * kStageVectors * sizeof(float4);
  static const bool configured = [] {
    DI_CUDA_CHECK(cudaFuncSetAttribute(decode_attention_kernel<kDims, kRows>,
                                       cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(kSharedBytes)));
    return true;
  }();
  (void)configured;
  const dim3 grid(static_cast<unsigned>(args.num_splits), static_cast<unsigned>(args.params.num_kv_heads),
                  static_cast<unsigned>(args.batch.num_seqs));
  decode_attention_kernel<kDims, kRows><<<grid, kWarps * 32, kSharedBytes, stream>>>(args);
  DI_CUDA_CHECK_LAUNCH("decode_attention_kernel");
}

template <int kRows>
void launch_for_dims(const AttentionArgs& args, cudaStream_t stream) {
  switch (args.params.head_dim) {
    case 64: return launch<64, kRows>(args, stream);
    case 128: return launch<128, kRows>(args, stream);
    default: return launch<256, kRows>(args, stream);
  }
}

}  // namespace

bool decode_kernel_fits(const AttentionParams& params) {
  const int32_t group = params.num_heads / params.num_kv_heads;
  return group <= 8 && (params.head_dim == 64 || params.head_dim == 128 || params.head_dim == 256);
}

void launch_decode_attention(const AttentionArgs& args, cudaStream_t stream) {
  DI_CHECK(decode_kernel_fits(args.params), "head_dim " << args.params.head_dim << ", heads " << args.params.num_heads
                                                        << "/" << args.params.num_kv_heads);
  if (args.params.num_heads / args.params.num_kv_heads <= 4) return launch_for_dims<4>(args, stream);
  launch_for_dims<8>(args, stream);
}

}  // namespace deepinfer::kernels::cuda::detail
