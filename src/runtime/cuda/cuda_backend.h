// The CUDA backend: device memory from a caching allocator, one compute stream, pinned staging for
// host<->device copies, weights copied to the GPU in their checkpoint dtype, and the ops of
// kernels/cuda. Ops return once enqueued; copy_to_host waits for the stream.
#pragma once

#include <memory>

#include "core/result.h"
#include "runtime/backend.h"

namespace deepinfer {

// Fails (naming the CUDA error) when no usable GPU is present.
Result<std::unique_ptr<Backend>> make_cuda_backend(const BackendOptions& options);

// cudaGetDeviceCount, 0 when it fails.
int32_t count_cuda_devices();

}  // namespace deepinfer
