// Tensor lookup, linear and norm loading.
#include "model/layers/linear.h"

namespace deepinfer {

Result<kernels::WeightView> load_tensor(const ModelSource& source, const std::string& name,
                                        const std::vector<int64_t>& shape) {
  auto tensor = source.weights->get(name, shape);
  if (!tensor.ok()) return tensor.error();
  return source.backend->load_weight(*tensor);
}

Result<Linear> Linear::load(const ModelSource& source, const std::string& prefix, int64_t out_features,
                            int64_t in_features, bool has_bias) {
  Linear linear;
  linear.in_features = in_features;
  linear.out_features = out_features;
  auto weight = load_tensor(source, prefix + ".weight", {out_features, in_features});
  if (!weight.ok()) return weight.error();
  linear.weight = *weight;
  if (has_bias) {
    auto bias = load_tensor(source, prefix + ".bias", {out_features});
    if (!bias.ok()) return bias.error();
    linear.bias = *bias;
  }
  return linear;
}

int64_t Linear::weight_bytes() const {
  int64_t bytes = weight.rows * weight.cols * static_cast<int64_t>(dtype_size_bytes(weight.dtype));
  if (bias.data != nullptr) bytes += bias.cols * static_cast<int64_t>(dtype_size_bytes(bias.dtype));
  return bytes;
}

Result<RmsNorm> RmsNorm::load(const ModelSource& source, const std::string& name, int64_t dim, double eps) {
  RmsNorm norm;
  norm.dim = dim;
  norm.eps = static_cast<float>(eps);
  auto weight = load_tensor(source, name, {dim});
  if (!weight.ok()) return weight.error();
  norm.weight = *weight;
  return norm;
}

}  // namespace deepinfer
