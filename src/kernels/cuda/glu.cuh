// The gated activations act(gate) * up on the device for the fused feed-forward kernels (the GEMV
// epilogue, the activation of stacked gate|up products); the same expressions as silu_mul_kernel
// and gelu_tanh_mul_kernel in elementwise.cu, so fused and unfused give the same bits.
#pragma once

namespace deepinfer::kernels::cuda {

__device__ __forceinline__ float silu_times(float gate, float up) { return gate / (1.0f + expf(-gate)) * up; }

__device__ __forceinline__ float gelu_tanh_times(float gate, float up) {
  constexpr float kSqrt2OverPi = 0.7978845608028654f;
  return 0.5f * gate * (1.0f + tanhf(kSqrt2OverPi * (gate + 0.044715f * gate * gate * gate))) * up;
}

template <bool kGelu>
__device__ __forceinline__ float glu(float gate, float up) {
  if constexpr (kGelu) {
    return gelu_tanh_times(gate, up);
  } else {
    return silu_times(gate, up);
  }
}

}  // namespace deepinfer::kernels::cuda
