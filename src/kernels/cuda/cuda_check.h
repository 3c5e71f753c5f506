// Checked CUDA and cuBLAS calls: a failure throws CudaError naming the call, file and line, so a
// device fault reaches the engine as an exception with the message, never as an abort.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <string>

#include "core/device_error.h"

namespace deepinfer::kernels::cuda {

// lost() for the errors CUDA documents as leaving the context unusable until the process ends.
class CudaError : public DeviceError {
 public:
  explicit CudaError(const std::string& message, bool lost = false) : DeviceError(message, lost) {}
};

// Whether status is one of those (cudaErrorIllegalAddress, cudaErrorAssert, ...).
bool poisons_context(cudaError_t status);

[[noreturn]] void throw_cuda_error(cudaError_t status, const char* call, const char* file, int line);
[[noreturn]] void throw_cublas_error(cublasStatus_t status, const char* call, const char* file, int line);

}  // namespace deepinfer::kernels::cuda

#define DI_CUDA_CHECK(call)                                                                   \
  do {                                                                                        \
    const cudaError_t di_cuda_status_ = (call);                                               \
    if (di_cuda_status_ != cudaSuccess) [[unlikely]] {                                        \
      ::deepinfer::kernels::cuda::throw_cuda_error(di_cuda_status_, #call, __FILE__, __LINE__); \
    }                                                                                         \
  } while (0)

#define DI_CUBLAS_CHECK(call)                                                                   \
  do {                                                                                          \
    const cublasStatus_t di_cublas_status_ = (call);                                            \
    if (di_cublas_status_ != CUBLAS_STATUS_SUCCESS) [[unlikely]] {                              \
      ::deepinfer::kernels::cuda::throw_cublas_error(di_cublas_status_, #call, __FILE__, __LINE__); \
    }                                                                                           \
  } while (0)

// After a kernel launch (kernel_name a string literal): launch-configuration errors surface here.
#define DI_CUDA_CHECK_LAUNCH(kernel_name)                                                                 \
  do {                                                                                                    \
    const cudaError_t di_cuda_status_ = cudaPeekAtLastError();                                            \
    if (di_cuda_status_ != cudaSuccess) [[unlikely]] {                                                    \
      ::deepinfer::kernels::cuda::throw_cuda_error(di_cuda_status_, "launch of " kernel_name, __FILE__, __LINE__); \
    }                                                                                                     \
  } while (0)
