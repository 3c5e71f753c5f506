// CPU row payloads of expert-parallel exchanges: the reference row by row, rows in parallel.
#include "core/check.h"
#include "kernels/ops.h"

namespace deepinfer::kernels::cpu {

void pack_rows(const float* x, int64_t num_rows, int64_t width, DType dtype, void* out) {
  // Checked here: an exception may not leave the parallel loop.
  DI_CHECK(is_payload_dtype(dtype), "row payloads are F32, BF16 or F8_E4M3, not " << dtype_name(dtype));
  const int64_t row_bytes = payload_row_bytes(dtype, width);
#pragma omp parallel for schedule(static) if (num_rows > 1)
  for (int64_t r = 0; r < num_rows; ++r) {
    ref::pack_rows(x + r * width, 1, width, dtype, static_cast<char*>(out) + r * row_bytes);
  }
}

void unpack_rows(const void* packed, int64_t num_rows, int64_t width, DType dtype, float* out) {
  DI_CHECK(is_payload_dtype(dtype), "row payloads are F32, BF16 or F8_E4M3, not " << dtype_name(dtype));
  const int64_t row_bytes = payload_row_bytes(dtype, width);
#pragma omp parallel for schedule(static) if (num_rows > 1)
  for (int64_t r = 0; r < num_rows; ++r) {
    ref::unpack_rows(static_cast<const char*>(packed) + r * row_bytes, 1, width, dtype, out + r * width);
  }
}

}  // namespace deepinfer::kernels::cpu
