// Shared-memory carveout preferences (see shared_carveout.h).
#include "kernels/cuda/shared_carveout.h"

#include <algorithm>

#include "kernels/cuda/cuda_check.h"

namespace deepinfer::kernels::cuda {

void prefer_least_shared_carveout(const void* kernel, size_t dynamic_bytes, int blocks_per_sm) {
  int device = 0;
  DI_CUDA_CHECK(cudaGetDevice(&device));
  int max_shared = 0;
  int reserved = 0;
  DI_CUDA_CHECK(cudaDeviceGetAttribute(&max_shared, cudaDevAttrMaxSharedMemoryPerMultiprocessor, device));
  DI_CUDA_CHECK(cudaDeviceGetAttribute(&reserved, cudaDevAttrReservedSharedMemoryPerBlock, device));
  cudaFuncAttributes attributes{};
  DI_CUDA_CHECK(cudaFuncGetAttributes(&attributes, kernel));
  const size_t wanted =
      (dynamic_bytes + attributes.sharedSizeBytes + static_cast<size_t>(reserved)) * static_cast<size_t>(blocks_per_sm);
  const auto shared = static_cast<size_t>(std::max(max_shared, 1));
  const int percent = static_cast<int>(std::min<size_t>(100, (100 * wanted + shared - 1) / shared));
  DI_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributePreferredSharedMemoryCarveout, percent));
}

int32_t multiprocessor_count() {
  static const int32_t count = [] {
    int device = 0;
    DI_CUDA_CHECK(cudaGetDevice(&device));
    int sms = 0;
    DI_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
    return static_cast<int32_t>(sms);
  }();
  return count;
}

}  // namespace deepinfer::kernels::cuda
