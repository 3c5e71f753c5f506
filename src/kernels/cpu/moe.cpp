// CPU mixture-of-experts kernels: tokens grouped by expert (counting sort), one GEMM per active
// expert over its contiguous token group (kernels::cpu::matmul picks GEMV or oneDNN by rows),
// then a per-token weighted combine in top-k order.
#include "kernels/cpu/moe.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "core/check.h"
#include "kernels/cpu/matmul_invariant.h"

namespace deepinfer::kernels::cpu {
namespace {

using MatmulFn = void (*)(const float*, const WeightView&, const WeightView&, int64_t, float*);

void activate(const MoeExperts& experts, float* gate, const float* up, int64_t count) {
  if (experts.activation == ExpertActivation::kSiluGated) {
    silu_mul(gate, up, count, gate);
    return;
  }
  const float limit = experts.swiglu_limit;
  const float alpha = experts.swiglu_alpha;
#pragma omp parallel for schedule(static)
  for (int64_t i = 0; i < count; ++i) {
    const float g = std::min(gate[i], limit);
    const float u = std::clamp(up[i], -limit, limit);
    gate[i] = (u + 1.0f) * g / (1.0f + std::exp(-alpha * g));
  }
}

void run_experts(MatmulFn matmul_fn, const float* x, int64_t num_tokens, const int32_t* expert_ids,
                 const float* expert_weights, const MoeExperts& experts, float* workspace,
                 int64_t* expert_token_counts, float* out) {
  const int64_t hidden = experts.hidden;
  const int64_t inter = experts.intermediate;
  const int64_t num_slots = num_tokens * experts.top_k;
  // Counting sort of the (token, j) slots by expert: slot_row[s] is the gathered row of slot s.
  std::vector<int64_t> offsets(static_cast<size_t>(experts.num_experts) + 1, 0);
  for (int64_t s = 0; s < num_slots; ++s) {
    const int32_t e = expert_ids[s];
    DI_CHECK(e < experts.num_experts, "expert id " << e << " out of range");
    if (e >= 0) ++offsets[static_cast<size_t>(e) + 1];
  }
  for (int32_t e = 0; e < experts.num_experts; ++e) offsets[e + 1] += offsets[e];
  // Slots without an expert get no row (-1), which moe_combine skips.
  std::vector<int32_t> slot_row(static_cast<size_t>(num_slots), -1);
  std::vector<int64_t> fill(offsets.begin(), offsets.end() - 1);
  for (int64_t s = 0; s < num_slots; ++s) {
    if (expert_ids[s] >= 0) slot_row[s] = static_cast<int32_t>(fill[expert_ids[s]]++);
  }

  float* gathered = workspace;                  // [num_slots, hidden]
  float* gate = gathered + num_slots * hidden;  // [num_slots, intermediate]
  float* up = gate + num_slots * inter;         // [num_slots, intermediate]
  float* expert_out = up + num_slots * inter;   // [num_slots, hidden]
#pragma omp parallel for schedule(static)
  for (int64_t s = 0; s < num_slots; ++s) {
    if (slot_row[s] < 0) continue;
    std::memcpy(gathered + slot_row[s] * hidden, x + (s / experts.top_k) * hidden,
                static_cast<size_t>(hidden) * sizeof(float));
  }
  const WeightView none;
  for (int32_t e = 0; e < experts.num_experts; ++e) {
    const int64_t rows = offsets[e + 1] - offsets[e];
    if (rows == 0) continue;
    if (expert_token_counts != nullptr) expert_token_counts[e] += rows;
    const int64_t first = offsets[e];
    matmul_fn(gathered + first * hidden, experts.gate[e], experts.gate_bias ? experts.gate_bias[e] : none, rows,
              gate + first * inter);
    matmul_fn(gathered + first * hidden, experts.up[e], experts.up_bias ? experts.up_bias[e] : none, rows,
              up + first * inter);
  }
  activate(experts, gate, up, offsets.back() * inter);
  for (int32_t e = 0; e < experts.num_experts; ++e) {
    const int64_t rows = offsets[e + 1] - offsets[e];
    if (rows == 0) continue;
    const int64_t first = offsets[e];
    matmul_fn(gate + first * inter, experts.down[e], experts.down_bias ? experts.down_bias[e] : none, rows,
              expert_out + first * hidden);
  }
  moe_combine(expert_out, slot_row.data(), expert_weights, num_tokens, experts.top_k, hidden, out);
}

}  // namespace

void moe_route(const float* logits, const WeightView& selection_bias, int64_t num_tokens, const MoeRouting& routing,
               int32_t* expert_ids, float* expert_weights) {
  // Routing costs num_tokens * num_experts, negligible beside the experts: each token takes the
  // reference's float64 path, which also keeps expert choice identical across backends.
#pragma omp parallel for schedule(static)
  for (int64_t t = 0; t < num_tokens; ++t) {
    ref::moe_route(logits + t * routing.num_experts, selection_bias, 1, routing, expert_ids + t * routing.top_k,
                   expert_weights + t * routing.top_k);
  }
}

void moe_experts(const float* x, int64_t num_tokens, const int32_t* expert_ids, const float* expert_weights,
                 const MoeExperts& experts, float* workspace, int64_t* expert_token_counts, float* out) {
  run_experts(&matmul, x, num_tokens, expert_ids, expert_weights, experts, workspace, expert_token_counts, out);
}

void moe_experts_invariant(const float* x, int64_t num_tokens, const int32_t* expert_ids, const float* expert_weights,
                           const MoeExperts& experts, float* workspace, int64_t* expert_token_counts, float* out) {
  run_experts(&matmul_invariant, x, num_tokens, expert_ids, expert_weights, experts, workspace, expert_token_counts,
              out);
}

void moe_combine(const float* y, const int32_t* row_of_slot, const float* expert_weights, int64_t num_tokens,
                 int32_t top_k, int64_t hidden, float* out) {
#pragma omp parallel for schedule(static)
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
  ref::moe_dispatch(x, num_tokens, hidden, expert_ids, top_k, dispatch, send_rows);
}

void copy_rows(const float* src, int64_t src_stride, int64_t num_rows, int64_t width, float* dst, int64_t dst_stride) {
  for (int64_t r = 0; r < num_rows; ++r) {
    std::memcpy(dst + r * dst_stride, src + r * src_stride, static_cast<size_t>(width) * sizeof(float));
  }
}

}  // namespace deepinfer::kernels::cpu
