// The gated MLP: down(act(gate(x)) * up(x)) with act = SiLU (Llama family) or tanh-approximated
// GeLU (Gemma's GeGLU).
#pragma once

#include <optional>
#include <string>

#include "model/layers/linear.h"

namespace deepinfer {

using MlpActivation = GluActivation;

// The activation config.json names (hidden_activation / hidden_act); errors list the supported ones.
Result<MlpActivation> parse_mlp_activation(const std::string& name);

class GatedMlp {
 public:
  // prefix: e.g. "model.layers.3.mlp". Without biases, gate and up are stacked into one weight
  // where the backend does that (Backend::load_stacked_weight; FP8 ones kept packed through
  // load_stacked_packed_weight) and run as Backend::gated_mlp.
  static Result<GatedMlp> load(const ModelSource& source, const std::string& prefix, int64_t hidden,
                               int64_t intermediate, bool has_bias, MlpActivation activation = MlpActivation::kSilu);
  int64_t intermediate_size() const { return down_proj_.in_features; }
  int64_t weight_bytes() const;
  // x: [num_tokens, hidden] -> out: [num_tokens, hidden]; scratch: 2 * num_tokens * intermediate floats.
  void forward(Backend& backend, const float* x, int64_t num_tokens, float* scratch, float* out) const;
  // The same on the residual stream (ResidualStream): residual += forward(norm(residual)). Only
  // where takes_residual_stream(): gate and up stacked, no biases.
  bool takes_residual_stream() const { return gate_up_.has_value() && down_proj_.bias.data == nullptr; }
  void forward_residual(Backend& backend, const ResidualStream& stream, int64_t num_tokens, float* scratch) const {
    backend.norm_gated_mlp_add(stream.residual, stream.norm, *gate_up_, down_proj_.weight, num_tokens, activation_,
                               stream.normed, scratch, stream.delta);
  }

 private:
  Linear gate_proj_, up_proj_, down_proj_;  // gate_proj_ and up_proj_ stay empty when stacked
  std::optional<kernels::WeightView> gate_up_;  // [2 * intermediate, hidden]: gate rows, then up rows
  MlpActivation activation_ = MlpActivation::kSilu;
};

}  // namespace deepinfer
