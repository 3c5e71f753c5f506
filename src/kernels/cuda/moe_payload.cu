// Row payloads of expert-parallel exchanges on the device (kernels/ops.h pack_rows / unpack_rows):
// a block of kPayloadBlock threads per (row, block of kPayloadBlock values), a thread per value.
// Divisions are __fdiv_rn and conversions round to nearest even, so finite rows give kernels::ref's
// bytes (NaN codes may differ).
#include <cuda_bf16.h>
#include <cuda_fp8.h>

#include <cfloat>

#include "core/check.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/dependent_launch.cuh"
#include "kernels/cuda/device_util.cuh"
#include "kernels/cuda/moe_ops.h"

namespace deepinfer::kernels::cuda {
namespace {

constexpr int kThreads = static_cast<int>(kPayloadBlock);
static_assert(kThreads % 32 == 0, "whole warps per payload block");

__global__ void pack_rows_kernel(const float* __restrict__ x, int64_t width, DType dtype, uint8_t* __restrict__ out,
                                 int64_t row_bytes, int64_t scales_offset) {
  const int64_t row = blockIdx.x;
  const int64_t begin = int64_t{blockIdx.y} * kThreads;
  const int64_t i = begin + threadIdx.x;
  wait_for_previous_grid();
  allow_next_grid();
  const float value = i < width ? x[row * width + i] : 0.0f;
  uint8_t* dst = out + row * row_bytes;
  if (dtype == DType::kF32) {
    if (i < width) reinterpret_cast<float*>(dst)[i] = value;
  } else if (dtype == DType::kBF16) {
    if (i < width) reinterpret_cast<__nv_bfloat16*>(dst)[i] = __float2bfloat16_rn(value);
  } else {
    const float scale =
        fminf(fmaxf(__fdiv_rn(block_max<kThreads>(fabsf(value)), kF8E4M3Max), FLT_MIN), FLT_MAX / kF8E4M3Max);
    if (i < width) {
      dst[i] = __nv_cvt_float_to_fp8(__fdiv_rn(value, scale), __NV_SATFINITE, __NV_E4M3);
    } else if (i < scales_offset) {
      dst[i] = 0;
    }
    if (threadIdx.x == 0) reinterpret_cast<float*>(dst + scales_offset)[blockIdx.y] = scale;
  }
}

__global__ void unpack_rows_kernel(const uint8_t* __restrict__ packed, int64_t width, DType dtype, int64_t row_bytes,
                                   int64_t scales_offset, float* __restrict__ out) {
  const int64_t row = blockIdx.x;
  const int64_t i = int64_t{blockIdx.y} * kThreads + threadIdx.x;
  wait_for_previous_grid();
  allow_next_grid();
  if (i >= width) return;
  const uint8_t* src = packed + row * row_bytes;
  float value;
  if (dtype == DType::kF32) {
    value = reinterpret_cast<const float*>(src)[i];
  } else if (dtype == DType::kBF16) {
    value = __bfloat162float(reinterpret_cast<const __nv_bfloat16*>(src)[i]);
  } else {
    const float code = __half2float(__half(__nv_cvt_fp8_to_halfraw(src[i], __NV_E4M3)));
    value = code * reinterpret_cast<const float*>(src + scales_offset)[blockIdx.y];
  }
  out[row * width + i] = value;
}

dim3 payload_grid(int64_t num_rows, int64_t width) {
  DI_CHECK(num_rows < (int64_t{1} << 31) && (width + kThreads - 1) / kThreads < 65536,
           "row payloads of " << num_rows << " rows of " << width << " values");
  return dim3(static_cast<unsigned>(num_rows), static_cast<unsigned>((width + kThreads - 1) / kThreads));
}

}  // namespace

void pack_rows(const float* x, int64_t num_rows, int64_t width, DType dtype, void* out, cudaStream_t stream) {
  DI_CHECK(is_payload_dtype(dtype), "row payloads are F32, BF16 or F8_E4M3, not " << dtype_name(dtype));
  if (num_rows == 0 || width == 0) return;
  launch_dependent(pack_rows_kernel, payload_grid(num_rows, width), dim3(kThreads), 0, stream, x, width, dtype,
                   static_cast<uint8_t*>(out), payload_row_bytes(dtype, width), payload_scales_offset(width));
}

void unpack_rows(const void* packed, int64_t num_rows, int64_t width, DType dtype, float* out, cudaStream_t stream) {
  DI_CHECK(is_payload_dtype(dtype), "row payloads are F32, BF16 or F8_E4M3, not " << dtype_name(dtype));
  if (num_rows == 0 || width == 0) return;
  launch_dependent(unpack_rows_kernel, payload_grid(num_rows, width), dim3(kThreads), 0, stream,
                   static_cast<const uint8_t*>(packed), width, dtype, payload_row_bytes(dtype, width),
                   payload_scales_offset(width), out);
}

}  // namespace deepinfer::kernels::cuda
