// Building blocks shared by architectures: checkpoint tensor lookup, linear layers, RMSNorm.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kernels/ops.h"
#include "model/model.h"

namespace deepinfer {

// The tensor `name` with exactly `shape`, made usable by the source's backend.
Result<kernels::WeightView> load_tensor(const ModelSource& source, const std::string& name,
                                        const std::vector<int64_t>& shape);

// y = x W^T (+ b); W: [out_features, in_features] as in PyTorch.
struct Linear {
  kernels::WeightView weight;
  kernels::WeightView bias;  // data == nullptr when the layer has none
  int64_t in_features = 0;
  int64_t out_features = 0;

  // Loads prefix + ".weight" (and prefix + ".bias" when has_bias).
  static Result<Linear> load(const ModelSource& source, const std::string& prefix, int64_t out_features,
                             int64_t in_features, bool has_bias);
  // x: [num_rows, in_features] -> y: [num_rows, out_features]
  void forward(Backend& backend, const float* x, int64_t num_rows, float* y) const {
    backend.matmul(x, weight, bias, num_rows, y);
  }
  int64_t weight_bytes() const;
};

struct RmsNorm {
  kernels::WeightView weight;  // [dim]
  int64_t dim = 0;
  float eps = 0.0f;
  float weight_offset = 0.0f;  // Gemma stores w - 1

  static Result<RmsNorm> load(const ModelSource& source, const std::string& name, int64_t dim, double eps);
  // x, out: [num_rows, dim]
  void forward(Backend& backend, const float* x, int64_t num_rows, float* out) const {
    backend.rms_norm(x, weight, weight_offset, num_rows, dim, eps, out);
  }
  // residual += x; out = norm(residual)
  void add_forward(Backend& backend, float* residual, const float* x, int64_t num_rows, float* out) const {
    backend.add_rms_norm(residual, x, weight, weight_offset, num_rows, dim, eps, out);
  }
};

}  // namespace deepinfer
