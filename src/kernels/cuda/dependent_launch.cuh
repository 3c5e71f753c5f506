// Programmatic dependent launch (Hopper): a kernel launched by launch_dependent may start while the
// kernel before it in the stream is still finishing, so its launch and its weight reads overlap that
// kernel's tail (or all of a one-block norm). Such a kernel must call wait_for_previous_grid, in
// every thread, before it reads what earlier kernels wrote or writes anything they may read.
#pragma once

#include <cuda_runtime.h>

#include "kernels/cuda/cuda_check.h"

namespace deepinfer::kernels::cuda {

// Blocks until the kernels before this one in the stream have finished and their writes are visible.
__device__ __forceinline__ void wait_for_previous_grid() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

// Lets the next kernel in the stream, if launched by launch_dependent, start once every block of
// this one has called this or exited (it then waits in wait_for_previous_grid for our results).
__device__ __forceinline__ void allow_next_grid() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// kernel<<<grid, block, shared_bytes, stream>>>(args...) as a dependent launch.
template <typename... Params, typename... Args>
void launch_dependent(void (*kernel)(Params...), dim3 grid, dim3 block, size_t shared_bytes, cudaStream_t stream,
                      Args... args) {
  cudaLaunchAttribute attribute{};
  attribute.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attribute.val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t config{};
  config.gridDim = grid;
  config.blockDim = block;
  config.dynamicSmemBytes = shared_bytes;
  config.stream = stream;
  config.attrs = &attribute;
  config.numAttrs = 1;
  DI_CUDA_CHECK(cudaLaunchKernelEx(&config, kernel, static_cast<Params>(args)...));
}

}  // namespace deepinfer::kernels::cuda
