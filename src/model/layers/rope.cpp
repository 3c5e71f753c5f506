// Rope inverse-frequency tables (transformers' modeling_rope_utils, recomputed in float64).
#include "model/layers/rope.h"

#include <algorithm>
#include <cmath>
#include <numbers>

namespace deepinfer {
namespace {

double yarn_mscale(double scale, double mscale) { return scale <= 1.0 ? 1.0 : 0.1 * mscale * std::log(scale) + 1.0; }

// The dimension index whose wavelength completes num_rotations turns over max_positions.
double yarn_correction_dim(double num_rotations, int64_t dim, double base, double max_positions) {
  return (static_cast<double>(dim) * std::log(max_positions / (num_rotations * 2.0 * std::numbers::pi))) /
         (2.0 * std::log(base));
}

void apply_llama3(const RopeConfig& rope, std::vector<double>& inv_freq) {
  const double old_context = static_cast<double>(rope.original_max_position_embeddings);
  const double low_freq_wavelen = old_context / rope.low_freq_factor;
  const double high_freq_wavelen = old_context / rope.high_freq_factor;
  for (double& f : inv_freq) {
    const double wavelen = 2.0 * std::numbers::pi / f;
    if (wavelen > low_freq_wavelen) {
      f = f / rope.factor;
    } else if (wavelen >= high_freq_wavelen) {
      const double smooth =
          (old_context / wavelen - rope.low_freq_factor) / (rope.high_freq_factor - rope.low_freq_factor);
      f = (1.0 - smooth) * f / rope.factor + smooth * f;
    }
  }
}

float apply_yarn(const RopeConfig& rope, int64_t dim, int64_t max_position_embeddings, std::vector<double>& inv_freq) {
  double factor = rope.factor;
  double original_max = static_cast<double>(max_position_embeddings);
  // Checkpoints that record the pre-training length (DeepSeek-V3, Qwen3 long-context) scale by the
  // ratio of the two lengths, as transformers does.
  if (rope.original_max_position_embeddings > 0) {
    original_max = static_cast<double>(rope.original_max_position_embeddings);
    factor = static_cast<double>(max_position_embeddings) / original_max;
  }
  double attention_factor = 0.0;
  if (rope.attention_factor) {
    attention_factor = *rope.attention_factor;
  } else if (rope.mscale != 0.0 && rope.mscale_all_dim != 0.0) {
    attention_factor = yarn_mscale(factor, rope.mscale) / yarn_mscale(factor, rope.mscale_all_dim);
  } else {
    attention_factor = yarn_mscale(factor, 1.0);
  }
  double low = yarn_correction_dim(rope.beta_fast, dim, rope.theta, original_max);
  double high = yarn_correction_dim(rope.beta_slow, dim, rope.theta, original_max);
  if (rope.truncate) {
    low = std::floor(low);
    high = std::ceil(high);
  }
  low = std::max(low, 0.0);
  high = std::min(high, static_cast<double>(dim - 1));
  if (low == high) high += 0.001;
  for (size_t i = 0; i < inv_freq.size(); ++i) {
    const double ramp = std::clamp((static_cast<double>(i) - low) / (high - low), 0.0, 1.0);
    const double extrapolation_weight = 1.0 - ramp;
    const double extrapolated = inv_freq[i];
    const double interpolated = inv_freq[i] / factor;
    inv_freq[i] = interpolated * (1.0 - extrapolation_weight) + extrapolated * extrapolation_weight;
  }
  return static_cast<float>(attention_factor);
}

}  // namespace

Result<RopeTable> make_rope_table(const RopeConfig& rope, int64_t head_dim, int64_t max_position_embeddings) {
  const auto dim = static_cast<int64_t>(static_cast<double>(head_dim) * rope.partial_rotary_factor);
  if (dim <= 0 || dim % 2 != 0 || dim > head_dim) {
    return Error{"rope: rotary dimension " + std::to_string(dim) + " (head_dim " + std::to_string(head_dim) +
                 " x partial_rotary_factor) must be even, positive and at most head_dim"};
  }
  std::vector<double> inv_freq(static_cast<size_t>(dim / 2));
  for (size_t i = 0; i < inv_freq.size(); ++i) {
    inv_freq[i] = 1.0 / std::pow(rope.theta, static_cast<double>(2 * i) / static_cast<double>(dim));
  }
  RopeTable table;
  table.rotary_dim = static_cast<int32_t>(dim);
  switch (rope.type) {
    case RopeType::kDefault: break;
    case RopeType::kLinear:
      for (double& f : inv_freq) f /= rope.factor;
      break;
    case RopeType::kLlama3:
      if (rope.original_max_position_embeddings <= 0) {
        return Error{"rope: llama3 scaling needs original_max_position_embeddings"};
      }
      apply_llama3(rope, inv_freq);
      break;
    case RopeType::kYarn: table.attention_scaling = apply_yarn(rope, dim, max_position_embeddings, inv_freq); break;
    case RopeType::kDynamic:
      return Error{"rope: rope_type 'dynamic' (NTK scaling that changes with sequence length) is not supported; "
                   "supported: default, linear, llama3, yarn"};
  }
  table.inv_freq.assign(inv_freq.begin(), inv_freq.end());
  if (!rope.mrope_section.empty()) {
    int64_t covered = 0;
    for (int64_t size : rope.mrope_section) covered += size;
    if (rope.mrope_section.size() != 3 || covered != dim / 2 || table.attention_scaling != 1.0f) {
      return Error{"rope: mrope_section must be 3 sizes (temporal, height, width) summing to rotary_dim / 2 = " +
                   std::to_string(dim / 2) + " over unscaled frequencies"};
    }
    const auto& sections = rope.mrope_section;
    table.mrope_axis.assign(static_cast<size_t>(dim / 2), 0);
    for (int64_t i = 0; i < dim / 2; ++i) {
      int8_t& axis = table.mrope_axis[static_cast<size_t>(i)];
      if (rope.mrope_interleaved) {  // transformers' apply_interleaved_mrope
        if (i % 3 == 1 && i < 3 * sections[1]) axis = 1;
        if (i % 3 == 2 && i < 3 * sections[2]) axis = 2;
      } else {
        axis = i < sections[0] ? 0 : i < sections[0] + sections[1] ? 1 : 2;
      }
    }
  }
  return table;
}

}  // namespace deepinfer
