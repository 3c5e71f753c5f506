// CPU row payloads of expert-parallel exchanges: the reference row by row, rows in parallel.
#include "kernels/ops.h"

namespace deepinfer::kernels::cpu {

void pack_rows(const float* x, int64_t num_rows, int64_t width, DType dtype, void* out) {
  const int64_t row_bytes = payload_row_bytes(dtype, width);
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < num_rows; ++r) {
    ref::pack_rows(x + r * width, 1, width, dtype, static_cast<char*>(out) + r * row_bytes);
  }
}

void unpack_rows(const void* packed, int64_t num_rows, int64_t width, DType dtype, float* out) {
  const int64_t row_bytes = payload_row_bytes(dtype, width);
#pragma omp parallel for schedule(static)
  for (int64_t r = 0; r < num_rows; ++r) {
    ref::unpack_rows(static_cast<const char*>(packed) + r * row_bytes, 1, width, dtype, out + r * width);
  }
}

}  // namespace deepinfer::kernels::cpu
