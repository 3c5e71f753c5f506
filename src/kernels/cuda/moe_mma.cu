// Grouped expert products on the tensor cores (WMMA 16x16x16, bf16 or f16 in, float32 accumulate)
// for batches with several rows per expert: a block computes a kBM x kBN tile of one expert's
// grouped rows (and, for gate+up, the same columns of both matrices, so the activation runs in the
// epilogue). Inputs are float32 rows rounded to the weight dtype in shared memory. This file holds
// the kernel for any shape (element loads staged through registers, double-buffered) and the
// dispatch; aligned shapes take the cp.async pipeline of moe_mma_async.cu.
#include "core/check.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/moe_mma.cuh"

namespace deepinfer::kernels::cuda {
namespace {

using namespace mma_tile;

template <typename W, int kMats>
struct Staged {
  W a[kBM][kPadK];
  W b[kMats][kBN][kPadK];
};

template <typename W, bool kGateUp>
__global__ void __launch_bounds__(kThreads)
    mma_kernel(const float* __restrict__ in, GroupedExperts experts, MoeGrouping grouping, int64_t n_out,
               int64_t k_in, float* __restrict__ out) {
  constexpr int kMats = kGateUp ? 2 : 1;
  constexpr size_t kSmemBytes = 2 * sizeof(Staged<W, kMats>) > sizeof(Results<kMats>)
                                    ? 2 * sizeof(Staged<W, kMats>)
                                    : sizeof(Results<kMats>);
  __shared__ alignas(128) unsigned char smem[kSmemBytes];
  auto* staged = reinterpret_cast<Staged<W, kMats>*>(smem);  // [2]: one multiplied, one filled

  ExpertTile tile;
  if (!find_tile(grouping, experts.num_experts, static_cast<int32_t>(blockIdx.x), kBM, tile)) return;
  const int64_t col0 = blockIdx.y * int64_t{kBN};
  const ExpertPointers& p = experts.experts[tile.expert];
  const auto src = stage_sources<W, kMats, kGateUp>(in, experts, grouping, tile, col0, n_out, k_in);

  // The next k-step in registers while the tensor cores work on the current one.
  float a_next[16];
  W b_next[kMats][16];
  const auto load_step = [&](int64_t k0) {
    const int64_t k = k0 + src.k;
#pragma unroll
    for (int v = 0; v < 16; ++v) {
      const bool in_range = k + v < k_in;
      a_next[v] = src.a_valid && in_range ? src.a[k + v] : 0.0f;
#pragma unroll
      for (int m = 0; m < kMats; ++m) b_next[m][v] = src.b_valid && in_range ? src.b[m][k + v] : from_float<W>(0.0f);
    }
  };
  const auto store_step = [&](Staged<W, kMats>& dst) {
#pragma unroll
    for (int v = 0; v < 16; ++v) {
      dst.a[src.row][src.k + v] = from_float<W>(a_next[v]);
#pragma unroll
      for (int m = 0; m < kMats; ++m) dst.b[m][src.row][src.k + v] = b_next[m][v];
    }
  };

  Accumulators<kMats> acc;
  zero<kMats>(acc);
  load_step(0);
  store_step(staged[0]);
  __syncthreads();
  int current = 0;
  for (int64_t k0 = 0; k0 < k_in; k0 += kBK) {
    const bool has_next = k0 + kBK < k_in;
    if (has_next) load_step(k0 + kBK);
    multiply_step<W, kMats>(staged[current].a, staged[current].b, acc);
    if (has_next) store_step(staged[current ^ 1]);
    __syncthreads();
    current ^= 1;
  }
  store_tile<kGateUp, kMats>(acc, *reinterpret_cast<Results<kMats>*>(smem), tile, col0, n_out, p, experts, out);
}

template <typename W, bool kGateUp>
void launch(const float* in, const GroupedExperts& experts, const MoeGrouping& grouping, int64_t num_rows,
            float* out, cudaStream_t stream) {
  const int64_t n_out = kGateUp ? experts.intermediate : experts.hidden;
  const int64_t k_in = kGateUp ? experts.hidden : experts.intermediate;
  if (experts.aligned && k_in % 16 == 0 && reinterpret_cast<uintptr_t>(in) % 16 == 0) {
    launch_async<W, kGateUp>(in, experts, grouping, num_rows, out, stream);
    return;
  }
  const dim3 grid(static_cast<unsigned>(moe_max_tiles(MoeKernel::kTensorCore, num_rows, experts.num_experts)),
                  static_cast<unsigned>((n_out + kBN - 1) / kBN));
  mma_kernel<W, kGateUp><<<grid, kThreads, 0, stream>>>(in, experts, grouping, n_out, k_in, out);
  DI_CUDA_CHECK_LAUNCH("mma_kernel");
}

}  // namespace

void mma_grouped(const float* in, const GroupedExperts& experts, const MoeGrouping& grouping, int64_t num_rows,
                 bool gate_up, float* out, cudaStream_t stream) {
  DI_CHECK(experts.weight_dtype == DType::kBF16 || experts.weight_dtype == DType::kF16,
           "the tensor-core expert kernel takes bf16 or f16 weights");
  with_16bit_weights(experts.weight_dtype, gate_up, [&]<typename W, bool kGateUp>() {
    launch<W, kGateUp>(in, experts, grouping, num_rows, out, stream);
  });
}

}  // namespace deepinfer::kernels::cuda
