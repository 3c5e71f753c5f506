// Formats CUDA and cuBLAS failures into CudaError messages.
#include "kernels/cuda/cuda_check.h"

namespace deepinfer::kernels::cuda {

void throw_cuda_error(cudaError_t status, const char* call, const char* file, int line) {
  throw CudaError(std::string("CUDA error ") + cudaGetErrorName(status) + " (" + cudaGetErrorString(status) +
                  ") in " + call + " at " + file + ":" + std::to_string(line));
}

void throw_cublas_error(cublasStatus_t status, const char* call, const char* file, int line) {
  throw CudaError(std::string("cuBLAS error ") + cublasLtGetStatusName(status) + " (" +
                  cublasLtGetStatusString(status) + ") in " + call + " at " + file + ":" + std::to_string(line));
}

}  // namespace deepinfer::kernels::cuda
