// The gated MLP: down(act(gate(x)) * up(x)) with act = SiLU (Llama family) or tanh-approximated
// GeLU (Gemma's GeGLU).
#pragma once

#include <string>

#include "model/layers/linear.h"

namespace deepinfer {

enum class MlpActivation : uint8_t { kSilu, kGeluTanh };

// The activation config.json names (hidden_activation / hidden_act); errors list the supported ones.
Result<MlpActivation> parse_mlp_activation(const std::string& name);

class GatedMlp {
 public:
  // prefix: e.g. "model.layers.3.mlp"
  static Result<GatedMlp> load(const ModelSource& source, const std::string& prefix, int64_t hidden,
                               int64_t intermediate, bool has_bias, MlpActivation activation = MlpActivation::kSilu);
  int64_t intermediate_size() const { return gate_proj_.out_features; }
  int64_t weight_bytes() const;
  // x: [num_tokens, hidden] -> out: [num_tokens, hidden]; scratch: 2 * num_tokens * intermediate floats.
  void forward(Backend& backend, const float* x, int64_t num_tokens, float* scratch, float* out) const;

 private:
  Linear gate_proj_, up_proj_, down_proj_;
  MlpActivation activation_ = MlpActivation::kSilu;
};

}  // namespace deepinfer
