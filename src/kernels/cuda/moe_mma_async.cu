// The tensor-core expert kernel for rows whose length is a multiple of 16 (every real model): a
// kStages-deep cp.async pipeline copies float32 input rows and bf16/f16 weight rows straight into
// shared memory, so kStages - 1 k-steps of loads are in flight while the tensor cores work; each
// thread then rounds its own input elements to the weight dtype for WMMA. Same tile and epilogue
// as moe_mma.cu.
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/moe_mma.cuh"

namespace deepinfer::kernels::cuda::mma_tile {
namespace {

constexpr int kStages = 3;
// Row stride of the copied inputs, in floats: 4 past kBK, so the quarter-warp phases of the float4
// reads below (4 rows x 2 halves) hit 8 different bank groups.
constexpr int kPadF32 = kBK + 4;

template <typename W, int kMats>
struct Pipeline {
  float a_f32[kStages][kBM][kPadF32];    // the inputs as copied
  W b[kStages][kMats][kBN][kPadK];       // the weights as copied
  W a[2][kBM][kPadK];                    // the inputs rounded, for the product of this step and the next
};

template <typename W, int kMats>
constexpr size_t smem_bytes() {
  return sizeof(Pipeline<W, kMats>) > sizeof(Results<kMats>) ? sizeof(Pipeline<W, kMats>) : sizeof(Results<kMats>);
}

// 16 bytes from global to shared memory without passing registers; zeros instead when !valid (src is
// then not read).
__device__ __forceinline__ void copy_async16(void* dst, const void* src, bool valid) {
  const auto shared = static_cast<unsigned>(__cvta_generic_to_shared(dst));
  const int src_bytes = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(shared), "l"(src), "r"(src_bytes));
}

__device__ __forceinline__ void commit_copies() { asm volatile("cp.async.commit_group;\n" ::); }

// Waits until at most kStages - 2 committed groups are pending.
__device__ __forceinline__ void wait_copies() { asm volatile("cp.async.wait_group %0;\n" ::"n"(kStages - 2)); }

template <typename W, bool kGateUp>
__global__ void __launch_bounds__(kThreads)
    mma_async_kernel(const float* __restrict__ in, GroupedExperts experts, MoeGrouping grouping, int64_t n_out,
                     int64_t k_in, float* __restrict__ out) {
  constexpr int kMats = kGateUp ? 2 : 1;
  extern __shared__ __align__(128) unsigned char smem[];
  auto& pipe = *reinterpret_cast<Pipeline<W, kMats>*>(smem);

  ExpertTile tile;
  if (!find_tile(grouping, experts.num_experts, static_cast<int32_t>(blockIdx.x), kBM, tile)) return;
  const int64_t col0 = blockIdx.y * int64_t{kBN};
  const ExpertPointers& p = experts.experts[tile.expert];
  const auto src = stage_sources<W, kMats, kGateUp>(in, experts, grouping, tile, col0, n_out, k_in);

  const int64_t num_steps = (k_in + kBK - 1) / kBK;
  // k_in % 16 == 0, so a thread's half row is all in range or all out.
  const auto issue = [&](int64_t step) {
    const int slot = static_cast<int>(step % kStages);
    const int64_t k = step * kBK + src.k;
    const bool in_range = k < k_in;
#pragma unroll
    for (int v = 0; v < 16; v += 4) {
      copy_async16(&pipe.a_f32[slot][src.row][src.k + v], src.a_valid && in_range ? src.a + k + v : in,
                   src.a_valid && in_range);
    }
#pragma unroll
    for (int m = 0; m < kMats; ++m) {
#pragma unroll
      for (int v = 0; v < 16; v += 8) {
        copy_async16(&pipe.b[slot][m][src.row][src.k + v], src.b_valid && in_range ? src.b[m] + k + v : src.b[m],
                     src.b_valid && in_range);
      }
    }
  };

  Accumulators<kMats> acc;
  zero<kMats>(acc);
  // One commit per step, even when nothing was issued, so wait_copies always means "step s landed".
#pragma unroll
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < num_steps) issue(s);
    commit_copies();
  }
  for (int64_t step = 0; step < num_steps; ++step) {
    const int slot = static_cast<int>(step % kStages);
    const int buffer = static_cast<int>(step % 2);
    wait_copies();
    // Each thread rounds the inputs it copied itself (its own copies are complete and visible to it).
    const auto* copied = reinterpret_cast<const float4*>(&pipe.a_f32[slot][src.row][src.k]);
    alignas(16) W rounded[16];
#pragma unroll
    for (int c = 0; c < 4; ++c) {
      const float4 x = copied[c];
      rounded[4 * c] = from_float<W>(x.x);
      rounded[4 * c + 1] = from_float<W>(x.y);
      rounded[4 * c + 2] = from_float<W>(x.z);
      rounded[4 * c + 3] = from_float<W>(x.w);
    }
    auto* a_dst = reinterpret_cast<uint4*>(&pipe.a[buffer][src.row][src.k]);
    a_dst[0] = reinterpret_cast<const uint4*>(rounded)[0];
    a_dst[1] = reinterpret_cast<const uint4*>(rounded)[1];
    // After this barrier every thread has finished step - 1's product, so its slot can be refilled.
    __syncthreads();
    if (step + kStages - 1 < num_steps) issue(step + kStages - 1);
    commit_copies();
    multiply_step<W, kMats>(pipe.a[buffer], pipe.b[slot], acc);
  }
  __syncthreads();  // the results below overwrite the pipeline buffers
  store_tile<kGateUp, kMats>(acc, *reinterpret_cast<Results<kMats>*>(smem), tile, col0, n_out, p, experts, out);
}

}  // namespace

template <typename W, bool kGateUp>
void launch_async(const float* in, const GroupedExperts& experts, const MoeGrouping& grouping, int64_t num_rows,
                  float* out, cudaStream_t stream) {
  constexpr int kMats = kGateUp ? 2 : 1;
  constexpr size_t kBytes = smem_bytes<W, kMats>();
  // Above the 48 KB default a kernel must opt in, once per process.
  static const bool opted_in = [] {
    DI_CUDA_CHECK(cudaFuncSetAttribute(mma_async_kernel<W, kGateUp>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       static_cast<int>(kBytes)));
    return true;
  }();
  (void)opted_in;
  const int64_t n_out = kGateUp ? experts.intermediate : experts.hidden;
  const int64_t k_in = kGateUp ? experts.hidden : experts.intermediate;
  const dim3 grid(static_cast<unsigned>(moe_max_tiles(MoeKernel::kTensorCore, num_rows, experts.num_experts)),
                  static_cast<unsigned>((n_out + kBN - 1) / kBN));
  mma_async_kernel<W, kGateUp><<<grid, kThreads, kBytes, stream>>>(in, experts, grouping, n_out, k_in, out);
  DI_CUDA_CHECK_LAUNCH("mma_async_kernel");
}

template void launch_async<__nv_bfloat16, true>(const float*, const GroupedExperts&, const MoeGrouping&, int64_t,
                                                float*, cudaStream_t);
template void launch_async<__nv_bfloat16, false>(const float*, const GroupedExperts&, const MoeGrouping&, int64_t,
                                                 float*, cudaStream_t);
template void launch_async<__half, true>(const float*, const GroupedExperts&, const MoeGrouping&, int64_t, float*,
                                         cudaStream_t);
template void launch_async<__half, false>(const float*, const GroupedExperts&, const MoeGrouping&, int64_t, float*,
                                          cudaStream_t);

}  // namespace deepinfer::kernels::cuda::mma_tile
