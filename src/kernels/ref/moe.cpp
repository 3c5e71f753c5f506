// Reference mixture-of-experts kernels: routing in float64 and each token's experts run one row
// at a time through ref::matmul, so every other implementation has a plain oracle.
#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <vector>

#include "core/check.h"
#include "kernels/ops.h"

namespace deepinfer::kernels::ref {
namespace {

double bias_at(const WeightView& bias, int32_t expert) {
  if (bias.data == nullptr) return 0.0;
  float value = 0.0f;
  convert_to_f32(static_cast<const char*>(bias.data) + static_cast<size_t>(expert) * dtype_size_bytes(bias.dtype),
                 bias.dtype, 1, &value);
  return value;
}

// Indices of the k largest values, best first; ties go to the lower index.
std::vector<int32_t> top_indices(const std::vector<double>& values, int32_t k) {
  std::vector<int32_t> order(values.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return values[a] > values[b]; });
  order.resize(static_cast<size_t>(k));
  return order;
}

}  // namespace

void moe_route(const float* logits, const WeightView& selection_bias, int64_t num_tokens, const MoeRouting& routing,
               int32_t* expert_ids, float* expert_weights) {
  const int32_t num_experts = routing.num_experts;
  DI_CHECK(routing.top_k > 0 && routing.top_k <= num_experts, "top_k must be in [1, num_experts]");
  DI_CHECK(routing.num_groups >= 1 && num_experts % routing.num_groups == 0, "experts must split evenly into groups");
  const int32_t group_size = num_experts / routing.num_groups;
  std::vector<double> scores(static_cast<size_t>(num_experts));
  std::vector<double> choice(static_cast<size_t>(num_experts));
  for (int64_t t = 0; t < num_tokens; ++t) {
    const float* row = logits + t * num_experts;
    if (routing.scoring == MoeScoring::kSoftmax) {
      const double max_logit = *std::max_element(row, row + num_experts);
      double sum = 0.0;
      for (int32_t e = 0; e < num_experts; ++e) sum += scores[e] = std::exp(row[e] - max_logit);
      for (double& s : scores) s /= sum;
    } else {
      for (int32_t e = 0; e < num_experts; ++e) scores[e] = 1.0 / (1.0 + std::exp(-static_cast<double>(row[e])));
    }
    for (int32_t e = 0; e < num_experts; ++e) choice[e] = scores[e] + bias_at(selection_bias, e);
    if (routing.num_groups > 1) {
      std::vector<double> group_scores(static_cast<size_t>(routing.num_groups));
      for (int32_t g = 0; g < routing.num_groups; ++g) {
        std::vector<double> members(choice.begin() + g * group_size, choice.begin() + (g + 1) * group_size);
        std::sort(members.begin(), members.end(), std::greater<>());
        group_scores[g] = members[0];
        if (routing.group_score == MoeGroupScore::kTopTwoSum && members.size() > 1) group_scores[g] += members[1];
      }
      std::vector<bool> kept(static_cast<size_t>(routing.num_groups), false);
      for (int32_t g : top_indices(group_scores, routing.top_groups)) kept[g] = true;
      for (int32_t e = 0; e < num_experts; ++e) {
        if (!kept[e / group_size]) choice[e] = -std::numeric_limits<double>::infinity();
      }
    }
    const std::vector<int32_t> chosen = top_indices(choice, routing.top_k);
    double sum = 0.0;
    for (int32_t e : chosen) sum += scores[e];
    const double norm = routing.normalize ? 1.0 / (sum + 1e-20) : 1.0;
    for (int32_t j = 0; j < routing.top_k; ++j) {
      expert_ids[t * routing.top_k + j] = chosen[j];
      expert_weights[t * routing.top_k + j] = static_cast<float>(scores[chosen[j]] * norm * routing.scaling);
    }
  }
}

void moe_experts(const float* x, int64_t num_tokens, const int32_t* expert_ids, const float* expert_weights,
                 const MoeExperts& experts, float* workspace, int64_t* expert_token_counts, float* out) {
  const int64_t hidden = experts.hidden;
  const int64_t inter = experts.intermediate;
  float* gate = workspace;        // [intermediate]
  float* up = gate + inter;       // [intermediate]
  float* expert_out = up + inter;  // [hidden]
  for (int64_t t = 0; t < num_tokens; ++t) {
    float* out_row = out + t * hidden;
    std::fill(out_row, out_row + hidden, 0.0f);
    for (int32_t j = 0; j < experts.top_k; ++j) {
      const int32_t e = expert_ids[t * experts.top_k + j];
      if (e < 0) continue;
      DI_CHECK(e < experts.num_experts, "expert id " << e << " out of range");
      if (expert_token_counts != nullptr) ++expert_token_counts[e];
      const WeightView none;
      matmul(x + t * hidden, experts.gate[e], experts.gate_bias ? experts.gate_bias[e] : none, 1, gate);
      matmul(x + t * hidden, experts.up[e], experts.up_bias ? experts.up_bias[e] : none, 1, up);
      for (int64_t i = 0; i < inter; ++i) {
        double g = gate[i];
        double u = up[i];
        if (experts.activation == ExpertActivation::kSiluGated) {
          gate[i] = static_cast<float>(g / (1.0 + std::exp(-g)) * u);
        } else {
          const double limit = experts.swiglu_limit;
          g = std::min(g, limit);
          u = std::clamp(u, -limit, limit);
          gate[i] = static_cast<float>((u + 1.0) * g / (1.0 + std::exp(-experts.swiglu_alpha * g)));
        }
      }
      matmul(gate, experts.down[e], experts.down_bias ? experts.down_bias[e] : none, 1, expert_out);
      const float w = expert_weights[t * experts.top_k + j];
      for (int64_t i = 0; i < hidden; ++i) out_row[i] += w * expert_out[i];
    }
  }
}

void moe_combine(const float* y, const int32_t* row_of_slot, const float* expert_weights, int64_t num_tokens,
                 int32_t top_k, int64_t hidden, float* out) {
  for (int64_t t = 0; t < num_tokens; ++t) {
    float* out_row = out + t * hidden;
    std::fill(out_row, out_row + hidden, 0.0f);
    for (int32_t j = 0; j < top_k; ++j) {
      const int64_t s = t * top_k + j;
      const int64_t row = row_of_slot != nullptr ? int64_t{row_of_slot[s]} : s;
      if (row < 0) continue;
      const float w = expert_weights[s];
      const float* y_row = y + row * hidden;
      for (int64_t i = 0; i < hidden; ++i) out_row[i] += w * y_row[i];
    }
  }
}

void moe_dispatch(const float* x, int64_t num_tokens, int64_t hidden, const int32_t* expert_ids, int32_t top_k,
                  const ExpertDispatch& dispatch, float* send_rows) {
  const int64_t num_rows = int64_t{dispatch.world} * dispatch.room;
  std::fill(dispatch.send_slot, dispatch.send_slot + num_rows, -1);
  std::fill(send_rows, send_rows + num_rows * hidden, 0.0f);
  std::vector<int32_t> turns(static_cast<size_t>(dispatch.num_logical), 0);
  std::vector<int64_t> filled(static_cast<size_t>(dispatch.world), 0);
  for (int64_t s = 0; s < num_tokens * top_k; ++s) {
    const int32_t logical = expert_ids[s];
    DI_CHECK(logical >= 0 && logical < dispatch.num_logical, "expert id " << logical << " out of range");
    const int32_t first = dispatch.replica_offsets[logical];
    const int32_t copies = dispatch.replica_offsets[logical + 1] - first;
    const int32_t turn = dispatch.rank + turns[static_cast<size_t>(logical)]++;
    const int32_t physical = dispatch.replica_slots[first + turn % copies];
    const int32_t destination = physical / dispatch.slots_per_rank;
    const int64_t taken = filled[static_cast<size_t>(destination)]++;
    DI_CHECK(taken < dispatch.room, "moe_dispatch: more than " << dispatch.room << " rows for rank " << destination);
    const int64_t row = destination * dispatch.room + taken;
    dispatch.send_slot[row] = physical % dispatch.slots_per_rank;
    dispatch.row_of_slot[s] = static_cast<int32_t>(row);
    if (dispatch.routed_tokens != nullptr) ++dispatch.routed_tokens[logical];
    std::copy(x + (s / top_k) * hidden, x + (s / top_k + 1) * hidden, send_rows + row * hidden);
  }
}

void copy_rows(const float* src, int64_t src_stride, int64_t num_rows, int64_t width, float* dst, int64_t dst_stride) {
  for (int64_t r = 0; r < num_rows; ++r) {
    for (int64_t i = 0; i < width; ++i) dst[r * dst_stride + i] = src[r * src_stride + i];
  }
}

}  // namespace deepinfer::kernels::ref
