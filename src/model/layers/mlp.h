// The gated MLP of Llama-family models: down(silu(gate(x)) * up(x)).
#pragma once

#include <string>

#include "model/layers/linear.h"

namespace deepinfer {

class GatedMlp {
 public:
  // prefix: e.g. "model.layers.3.mlp"
  static Result<GatedMlp> load(const ModelSource& source, const std::string& prefix, int64_t hidden,
                               int64_t intermediate, bool has_bias);
  int64_t intermediate_size() const { return gate_proj_.out_features; }
  int64_t weight_bytes() const;
  // x: [num_tokens, hidden] -> out: [num_tokens, hidden]; scratch: 2 * num_tokens * intermediate floats.
  void forward(Backend& backend, const float* x, int64_t num_tokens, float* scratch, float* out) const;

 private:
  Linear gate_proj_, up_proj_, down_proj_;
};

}  // namespace deepinfer
