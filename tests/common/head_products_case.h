// A strided kernels::HeadProducts case for the backends' tests: rows, heads and weights padded
// apart (so a wrong stride reads or writes the wrong place), and the product summed in double
// over the inputs as given.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

#include "kernels/ops.h"

namespace deepinfer::testing {

struct HeadProductsCase {
  int32_t heads = 3;
  int64_t rows = 5;
  int64_t k = 40;
  int64_t n = 24;
  int64_t w_head_stride = 24 + 7;           // rows between heads' matrices
  int64_t x_head_stride = 40 + 3;           // floats between heads in a row of x
  int64_t x_row_stride = 3 * (40 + 3) + 5;  // floats between rows of x
  int64_t y_head_stride = 24 + 2;
  int64_t y_row_stride = 3 * (24 + 2) + 1;

  int64_t w_floats() const { return ((heads - 1) * w_head_stride + n) * k; }
  int64_t x_floats() const { return rows * x_row_stride; }
  int64_t y_floats() const { return rows * y_row_stride; }

  kernels::HeadProducts products(const float* x, const kernels::WeightView& w, float* y) const {
    kernels::HeadProducts p;
    p.x = x;
    p.x_row_stride = x_row_stride;
    p.x_head_stride = x_head_stride;
    p.w = w;
    p.w.rows = n;
    p.w.cols = k;
    p.w_head_stride = w_head_stride;
    p.num_heads = heads;
    p.num_rows = rows;
    p.y = y;
    p.y_row_stride = y_row_stride;
    p.y_head_stride = y_head_stride;
    return p;
  }

  // y as the products leave it, starting from y_before: the heads' slices replaced, the padding
  // between them untouched.
  std::vector<float> expected(const std::vector<float>& x, const std::vector<float>& w,
                              std::vector<float> y_before) const {
    for (int64_t t = 0; t < rows; ++t) {
      for (int32_t h = 0; h < heads; ++h) {
        for (int64_t i = 0; i < n; ++i) {
          double sum = 0.0;
          for (int64_t c = 0; c < k; ++c) {
            sum += double{x[t * x_row_stride + h * x_head_stride + c]} * w[(h * w_head_stride + i) * k + c];
          }
          y_before[t * y_row_stride + h * y_head_stride + i] = static_cast<float>(sum);
        }
      }
    }
    return y_before;
  }
};

}  // namespace deepinfer::testing
