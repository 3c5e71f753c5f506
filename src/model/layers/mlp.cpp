// The gated MLP (SwiGLU or GeGLU).
#include "model/layers/mlp.h"

namespace deepinfer {

Result<MlpActivation> parse_mlp_activation(const std::string& name) {
  if (name == "silu" || name == "swish") return MlpActivation::kSilu;
  // transformers' GELUTanh: PyTorch's gelu(approximate="tanh").
  if (name == "gelu_pytorch_tanh") return MlpActivation::kGeluTanh;
  return Error{"config.json: activation '" + name + "' is not supported (supported: silu, gelu_pytorch_tanh)"};
}

Result<GatedMlp> GatedMlp::load(const ModelSource& source, const std::string& prefix, int64_t hidden,
                                int64_t intermediate, bool has_bias, MlpActivation activation) {
  GatedMlp mlp;
  mlp.activation_ = activation;
  if (!has_bias) {
    auto gate = source.weights->get(prefix + ".gate_proj.weight", {intermediate, hidden});
    if (!gate.ok()) return gate.error();
    auto up = source.weights->get(prefix + ".up_proj.weight", {intermediate, hidden});
    if (!up.ok()) return up.error();
    // FP8 parts stack where they stay packed; mixed ones keep the separate products.
    if (gate->dtype == DType::kF8E4M3 && up->dtype == DType::kF8E4M3) {
      auto stacked = load_stacked_fp8(source, {{prefix + ".gate_proj.weight", {intermediate, hidden}},
                                               {prefix + ".up_proj.weight", {intermediate, hidden}}});
      if (!stacked.ok()) return stacked.error();
      mlp.gate_up_ = *stacked;
    } else if (gate->dtype != DType::kF8E4M3 && up->dtype != DType::kF8E4M3) {
      auto stacked = source.backend->load_stacked_weight({*gate, *up});
      if (!stacked.ok()) return stacked.error();
      mlp.gate_up_ = *stacked;
    }
  }
  if (!mlp.gate_up_) {
    auto gate = Linear::load(source, prefix + ".gate_proj", intermediate, hidden, has_bias);
    if (!gate.ok()) return gate.error();
    auto up = Linear::load(source, prefix + ".up_proj", intermediate, hidden, has_bias);
    if (!up.ok()) return up.error();
    mlp.gate_proj_ = *gate;
    mlp.up_proj_ = *up;
  }
  auto down = Linear::load(source, prefix + ".down_proj", hidden, intermediate, has_bias);
  if (!down.ok()) return down.error();
  mlp.down_proj_ = *down;
  return mlp;
}

int64_t GatedMlp::weight_bytes() const {
  const int64_t stacked = gate_up_ ? kernels::weight_bytes(*gate_up_) : 0;
  return stacked + gate_proj_.weight_bytes() + up_proj_.weight_bytes() + down_proj_.weight_bytes();
}

void GatedMlp::forward(Backend& backend, const float* x, int64_t num_tokens, float* scratch, float* out) const {
  if (gate_up_) {
    backend.gated_mlp(x, *gate_up_, down_proj_.weight, num_tokens, activation_, scratch, out);
    return;
  }
  const int64_t intermediate = intermediate_size();
  float* gate = scratch;                        // [num_tokens, intermediate]
  float* up = scratch + num_tokens * intermediate;  // [num_tokens, intermediate]
  backend.matmul_group(x, num_tokens,
                       {{gate_proj_.weight, gate_proj_.bias, gate}, {up_proj_.weight, up_proj_.bias, up}});
  if (activation_ == MlpActivation::kGeluTanh) {
    backend.gelu_tanh_mul(gate, up, num_tokens * intermediate, gate);
  } else {
    backend.silu_mul(gate, up, num_tokens * intermediate, gate);
  }
  down_proj_.forward(backend, gate, num_tokens, out);
}

}  // namespace deepinfer
