// The dense attention layer's front end in one launch (kernels::AttentionFrontEnd): qk-norm, rope
// of q and k, and the K/V cache write, in place of up to five kernels per layer.
#pragma once

#include <cuda_runtime.h>

#include "kernels/ops.h"

namespace deepinfer::kernels::cuda {

// The contract of kernels::AttentionFrontEnd on device pointers, enqueued on stream. head_dim up to
// 1024; caches kF32, kBF16 (rounded to nearest even) or kF8E4M3 (with front.cache_scales, as
// write_kv codes them). k is left as it was.
void attention_front_end(const AttentionFrontEnd& front, cudaStream_t stream);

}  // namespace deepinfer::kernels::cuda
