// Decode attention (one new token per sequence): a block serves one (split, KV head, sequence)
// and all the query heads of that KV head, so each K/V page is read from HBM once per step. Its
// warps take turns over passes of a few keys; within a warp, a group of lanes owns one key of the
// pass (each lane 16 float32 or 8 bf16 dims), so scores need only a short shuffle reduction and the values
// are used by the lanes that loaded them: nothing is shared between lanes but the query rows.
// Each lane streams its own K/V slices through a 4-stage cp.async ring in shared memory, which
// keeps several passes in flight without spending registers on them. Lane groups and then warps
// merge their online softmax states in a fixed order. bf16 and fp8 caches take the tensor-core kernel
// (attention_decode_mma.cu), whose grid is this kernel's: this one serves float32 caches.
#include <cmath>

#include "core/check.h"

#include "kernels/cuda/attention_internal.cuh"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/dependent_launch.cuh"

namespace deepinfer::kernels::cuda::detail {
namespace {

// The dims one lane owns of a key: 16 float32 (4 chunks of 16 bytes), or 8 bf16 (one chunk: fewer
// registers per lane, so more warps stay resident to cover the latency of each pass).
template <typename T>
__host__ __device__ constexpr int dims_per_lane() {
  return sizeof(T) == sizeof(float) ? 16 : 8;
}

// A warp's ring: 4 stages of K then V, each kChunks x 32 lanes of 16 bytes, and never less than
// the warp's final state (kRows rows of kDims + 4 floats).
template <typename T, int kDims, int kRows>
__host__ __device__ constexpr int ring_vectors() {
  constexpr int kStageRing = 4 * 2 * (dims_per_lane<T>() * static_cast<int>(sizeof(T)) / 16) * 32;
  constexpr int kState = (kRows * (kDims + 4) + 3) / 4;
  return kStageRing > kState ? kStageRing : kState;
}

// T: the cache element, float or __nv_bfloat16. Lane sub of a key owns kPerLane dims: kChunks
// 16-byte chunks of kElems elements, chunk c at dims c * kChunkStride + sub * kElems.
template <typename T, int kDims, int kRows>
__global__ void __launch_bounds__(kWarps * 32) decode_attention_kernel(AttentionArgs a) {
  wait_for_previous_grid();
  allow_next_grid();
  constexpr int kElems = 16 / static_cast<int>(sizeof(T));
  constexpr int kPerLane = dims_per_lane<T>();
  constexpr int kChunks = kPerLane / kElems;
  constexpr int kStageVectors = 2 * kChunks * 32;
  constexpr int kStages = 4;
  constexpr int kRingVectors = ring_vectors<T, kDims, kRows>();
  constexpr int kLanesPerKey = kDims / kPerLane;
  constexpr int kKeysPerPass = 32 / kLanesPerKey;
  constexpr int kChunkStride = kDims / kChunks;  // a lane's chunks sit this many dims apart
  constexpr int kStateStride = kDims + 4;  // per row: acc, then m and l; float4-aligned rows
  constexpr int kWarpFloats = kRingVectors * 4;
  static_assert(kRows * kStateStride <= kWarpFloats, "a warp's final state must fit its stage ring");
  extern __shared__ float4 shared_raw[];
  float* q_tile = reinterpret_cast<float*>(shared_raw);  // [kRows, kDims], pre-scaled
  float4* rings = shared_raw + kRows * kDims / 4;         // [kWarps][kRingVectors]

  const auto [decode, seq, token, split, kv_head, group, key_begin, key_end] = decode_block(a);
  if (!decode) return;
  const int32_t num_heads = a.params.num_heads;

  const int tid = static_cast<int>(threadIdx.x);
  const int warp = tid / 32;
  const int lane = tid % 32;
  const int sub = lane % kLanesPerKey;  // which 4 dims of each chunk this lane owns
  const int slot = lane / kLanesPerKey;  // which key of the pass
  float4* ring = rings + warp * kRingVectors;
  const int32_t num_passes = key_end > key_begin ? (key_end - key_begin + kKeysPerPass - 1) / kKeysPerPass : 0;
  const int32_t my_passes = num_passes > warp ? (num_passes - warp + kWarps - 1) / kWarps : 0;
  const PageTable pages = page_table(a, seq, kDims);
  const T* k_base = static_cast<const T*>(a.k_cache) + static_cast<int64_t>(kv_head) * kDims + sub * kElems;
  const T* v_base = static_cast<const T*>(a.v_cache) + static_cast<int64_t>(kv_head) * kDims + sub * kElems;
  const auto pass_key = [&](int32_t n) { return key_begin + (warp + n * kWarps) * kKeysPerPass + slot; };
  // Every call commits a group (empty past the last pass), so the wait count below stays exact.
  const auto issue = [&](int32_t n) {
    if (n < my_passes) {
      const int32_t key = pass_key(n);
      const bool valid = key < key_end;
      const int64_t offset = valid ? pages.row_offset(key) : 0;
      float4* dst = ring + (n % kStages) * kStageVectors + lane;
#pragma unroll
      for (int c = 0; c < kChunks; ++c) {
        cp_async16(dst + c * 32, k_base + offset + c * kChunkStride, valid);
        cp_async16(dst + kChunks * 32 + c * 32, v_base + offset + c * kChunkStride, valid);
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
  float acc[kRows][kPerLane];
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    m[r] = -INFINITY;
    l[r] = 0.0f;
#pragma unroll
    for (int i = 0; i < kPerLane; ++i) acc[r][i] = 0.0f;
  }
  for (int32_t n = 0; n < my_passes; ++n) {
    issue(n + kStages - 1);
    cp_async_wait<kStages - 1>();  // this lane's copies of pass n have landed (it reads only those)
    const float4* stage = ring + (n % kStages) * kStageVectors + lane;
    float k[kPerLane];
#pragma unroll
    for (int c = 0; c < kChunks; ++c) unpack16(stage[c * 32], k_base, k + c * kElems);
    const bool visible = pass_key(n) < key_end;
    float s[kRows];
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      float dot = 0.0f;
#pragma unroll
      for (int c = 0; c < kChunks; ++c) {
#pragma unroll
        for (int e = 0; e < kElems; e += 4) {
          const float4 qx = *reinterpret_cast<const float4*>(q_tile + r * kDims + c * kChunkStride + sub * kElems + e);
          const float* kx = k + c * kElems + e;
          dot = __fmaf_rn(qx.w, kx[3], __fmaf_rn(qx.z, kx[2], __fmaf_rn(qx.y, kx[1], __fmaf_rn(qx.x, kx[0], dot))));
        }
      }
#pragma unroll
      for (int offset = kLanesPerKey / 2; offset > 0; offset >>= 1) dot += __shfl_xor_sync(0xffffffffu, dot, offset);
      s[r] = visible ? dot : -INFINITY;
    }
    float v[kPerLane];
#pragma unroll
    for (int c = 0; c < kChunks; ++c) unpack16(stage[kChunks * 32 + c * 32], v_base, v + c * kElems);
#pragma unroll
    for (int r = 0; r < kRows; ++r) {
      const float m_new = fmaxf(m[r], s[r]);
      // Nothing seen yet keeps m = -inf; exp2 of (-inf) - (-inf) would be NaN.
      const float p = m_new == -INFINITY ? 0.0f : exp2f(s[r] - m_new);
      // The accumulators are rescaled only when the max moves (rarely, once it settles); otherwise
      // alpha is exactly 1 and skipping the products changes no bit.
      float alpha = 1.0f;
      if (m_new != m[r]) {
        alpha = exp2f(m[r] - m_new);
#pragma unroll
        for (int i = 0; i < kPerLane; ++i) acc[r][i] *= alpha;
        m[r] = m_new;
      }
      l[r] = __fmaf_rn(l[r], alpha, p);
#pragma unroll
      for (int i = 0; i < kPerLane; ++i) acc[r][i] = __fmaf_rn(p, v[i], acc[r][i]);
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
      for (int i = 0; i < kPerLane; ++i) {
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
      for (int i = 0; i < kPerLane; i += 4) {
        const int c = i / kElems;
        *reinterpret_cast<float4*>(state + r * kStateStride + c * kChunkStride + sub * kElems + i % kElems) =
            make_float4(acc[r][i], acc[r][i + 1], acc[r][i + 2], acc[r][i + 3]);
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
    write_decode_result(a, split, token, head, d, sum, m_all, denom);
  }
}

template <typename T, int kDims, int kRows>
constexpr size_t shared_bytes() {
  return kRows * kDims * sizeof(float) + size_t{kWarps} * ring_vectors<T, kDims, kRows>() * sizeof(float4);
}

template <typename T, int kDims, int kRows>
void launch(const AttentionArgs& args, cudaStream_t stream) {
  constexpr size_t kSharedBytes = shared_bytes<T, kDims, kRows>();
  static const bool configured = [] {
    DI_CUDA_CHECK(cudaFuncSetAttribute(decode_attention_kernel<T, kDims, kRows>,
                                       cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(kSharedBytes)));
    return true;
  }();
  (void)configured;
  const dim3 grid(static_cast<unsigned>(args.num_splits), static_cast<unsigned>(args.params.num_kv_heads),
                  static_cast<unsigned>(args.batch.num_seqs));
  launch_dependent(decode_attention_kernel<T, kDims, kRows>, grid, dim3(kWarps * 32), kSharedBytes, stream, args);
  DI_CUDA_CHECK_LAUNCH("decode_attention_kernel");
}

template <typename T, int kRows>
void launch_for_dims(const AttentionArgs& args, cudaStream_t stream) {
  switch (args.params.head_dim) {
    case 64: return launch<T, 64, kRows>(args, stream);
    case 128: return launch<T, 128, kRows>(args, stream);
    default: return launch<T, 256, kRows>(args, stream);
  }
}

template <typename T>
void launch_for_group(const AttentionArgs& args, cudaStream_t stream) {
  if (args.params.num_heads / args.params.num_kv_heads <= 4) return launch_for_dims<T, 4>(args, stream);
  launch_for_dims<T, 8>(args, stream);
}

// How many blocks of one instantiation an SM holds at once (registers and shared memory).
template <typename T, int kDims, int kRows>
int32_t resident_blocks() {
  static const int32_t blocks = [] {
    constexpr size_t kSharedBytes = shared_bytes<T, kDims, kRows>();
    DI_CUDA_CHECK(cudaFuncSetAttribute(decode_attention_kernel<T, kDims, kRows>,
                                       cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(kSharedBytes)));
    int count = 0;
    DI_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&count, decode_attention_kernel<T, kDims, kRows>,
                                                                kWarps * 32, kSharedBytes));
    return static_cast<int32_t>(count);
  }();
  return blocks;
}

template <typename T, int kRows>
int32_t resident_blocks_for_dims(int32_t head_dim) {
  switch (head_dim) {
    case 64: return resident_blocks<T, 64, kRows>();
    case 128: return resident_blocks<T, 128, kRows>();
    default: return resident_blocks<T, 256, kRows>();
  }
}

template <typename T>
int32_t resident_blocks_for_group(const AttentionParams& params) {
  if (params.num_heads / params.num_kv_heads <= 4) return resident_blocks_for_dims<T, 4>(params.head_dim);
  return resident_blocks_for_dims<T, 8>(params.head_dim);
}

}  // namespace

bool decode_kernel_fits(const AttentionParams& params) {
  const int32_t group = params.num_heads / params.num_kv_heads;
  return (group <= 8 && (params.head_dim == 64 || params.head_dim == 128 || params.head_dim == 256)) ||
         mla_decode_fits(params);
}

int32_t decode_resident_blocks(const AttentionParams& params) {
  DI_CHECK(decode_kernel_fits(params), "head_dim " << params.head_dim << ", heads " << params.num_heads << "/"
                                                   << params.num_kv_heads);
  // Every bf16 or fp8 cache that fits here fits a tensor-core kernel too: this kernel serves float32 caches.
  if (mla_decode_fits(params)) return mla_decode_resident_blocks(params);
  if (mma_decode_fits(params)) return mma_decode_resident_blocks(params);
  return resident_blocks_for_group<float>(params);
}

void launch_decode_attention(const AttentionArgs& args, const AttentionFrontEnd* front, cudaStream_t stream) {
  DI_CHECK(decode_kernel_fits(args.params), "head_dim " << args.params.head_dim << ", heads " << args.params.num_heads
                                                        << "/" << args.params.num_kv_heads);
  if (mma_decode_fits(args.params)) return launch_mma_decode_attention(args, front, stream);
  DI_CHECK(front == nullptr, "the attention front end folds only into the bf16 / fp8 tensor-core decode kernel");
  if (mla_decode_fits(args.params)) return launch_mla_decode_attention(args, stream);
  DI_CHECK(!args.cluster_combine && !args.balanced_splits,
           "only the tensor-core decode kernel combines splits in a cluster or balances them");
  launch_for_group<float>(args, stream);
}

}  // namespace deepinfer::kernels::cuda::detail
