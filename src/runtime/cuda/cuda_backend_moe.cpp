// CudaBackend's mixture of experts. Routing reads the router logits back and runs the reference
// router on the host (exact, synchronous); the experts then run as one cuBLASLt product per expert
// and routed slot over rows gathered in expert order, and slot j's outputs are added before slot
// j + 1's, the reference's summation order.
#include <algorithm>
#include <numeric>
#include <vector>

#include "core/check.h"
#include "runtime/cuda/cuda_backend_impl.h"

namespace deepinfer {

void CudaBackend::moe_route(const float* logits, const kernels::WeightView& selection_bias, int64_t num_tokens,
                            const kernels::MoeRouting& routing, int32_t* expert_ids, float* expert_weights) {
  if (num_tokens == 0) return;
  std::vector<float> host_logits(static_cast<size_t>(num_tokens * routing.num_experts));
  staging_->to_host(host_logits.data(), logits, host_logits.size() * sizeof(float));
  std::vector<char> host_bias;
  kernels::WeightView bias = selection_bias;
  if (bias.data != nullptr) {
    host_bias.resize(static_cast<size_t>(bias.rows * bias.cols) * dtype_size_bytes(bias.dtype));
    staging_->to_host(host_bias.data(), bias.data, host_bias.size());
    bias.data = host_bias.data();
  }
  const auto picks = static_cast<size_t>(num_tokens * routing.top_k);
  std::vector<int32_t> host_ids(picks);
  std::vector<float> host_weights(picks);
  kernels::ref::moe_route(host_logits.data(), bias, num_tokens, routing, host_ids.data(), host_weights.data());
  staging_->to_device(expert_ids, host_ids.data(), picks * sizeof(int32_t));
  staging_->to_device(expert_weights, host_weights.data(), picks * sizeof(float));
}

void CudaBackend::moe_experts(const float* x, int64_t num_tokens, const int32_t* expert_ids,
                              const float* expert_weights, const kernels::MoeExperts& experts, float* workspace,
                              int64_t* expert_token_counts, float* out) {
  const int64_t n = num_tokens;
  const int64_t hidden = experts.hidden;
  const int64_t inter = experts.intermediate;
  const int32_t top_k = experts.top_k;
  DI_CUDA_CHECK(cudaMemsetAsync(out, 0, static_cast<size_t>(n * hidden) * sizeof(float), stream_));
  if (n == 0) return;
  std::vector<int32_t> ids(static_cast<size_t>(n * top_k));
  staging_->to_host(ids.data(), expert_ids, ids.size() * sizeof(int32_t));

  // rows[j]: slot j's tokens ordered by expert (stable); starts[j][e]: where expert e's run begins.
  std::vector<int32_t> rows(static_cast<size_t>(n * top_k));
  std::vector<std::vector<int64_t>> starts(static_cast<size_t>(top_k),
                                           std::vector<int64_t>(static_cast<size_t>(experts.num_experts) + 1, 0));
  std::vector<int64_t> counts(static_cast<size_t>(experts.num_experts), 0);
  for (int32_t j = 0; j < top_k; ++j) {
    auto slot_rows = rows.begin() + j * n;
    std::iota(slot_rows, slot_rows + n, 0);
    const auto expert_of = [&](int32_t t) { return ids[static_cast<size_t>(t * top_k + j)]; };
    std::stable_sort(slot_rows, slot_rows + n, [&](int32_t a, int32_t b) { return expert_of(a) < expert_of(b); });
    std::vector<int64_t>& bounds = starts[static_cast<size_t>(j)];
    for (int64_t t = 0; t < n; ++t) {
      const int32_t e = expert_of(static_cast<int32_t>(t));
      DI_CHECK(e >= 0 && e < experts.num_experts, "expert id " << e << " out of range");
      ++bounds[static_cast<size_t>(e) + 1];
      ++counts[static_cast<size_t>(e)];
    }
    for (size_t e = 1; e < bounds.size(); ++e) bounds[e] += bounds[e - 1];
  }
  void* device_rows = allocator_.allocate(rows.size() * sizeof(int32_t));
  staging_->to_device(device_rows, rows.data(), rows.size() * sizeof(int32_t));

  float* gathered = workspace;           // [n, hidden]
  float* gate = gathered + n * hidden;   // [n, intermediate]
  float* up = gate + n * inter;          // [n, intermediate]
  float* expert_out = up + n * inter;    // [n, hidden]
  const auto linear = [&](const float* in, const kernels::WeightView& w, const kernels::WeightView* biases,
                          int32_t e, int64_t count, float* y) {
    gemm_.matmul(in, w, count, y, stream_);
    if (biases != nullptr && biases[e].data != nullptr) kc::add_bias(y, biases[e], count, stream_);
  };
  for (int32_t j = 0; j < top_k; ++j) {
    const int32_t* slot_rows = static_cast<const int32_t*>(device_rows) + j * n;
    const std::vector<int64_t>& bounds = starts[static_cast<size_t>(j)];
    kc::gather_rows(x, slot_rows, n, hidden, gathered, stream_);
    for (int32_t e = 0; e < experts.num_experts; ++e) {
      const int64_t begin = bounds[static_cast<size_t>(e)];
      const int64_t count = bounds[static_cast<size_t>(e) + 1] - begin;
      if (count == 0) continue;
      linear(gathered + begin * hidden, experts.gate[e], experts.gate_bias, e, count, gate + begin * inter);
      linear(gathered + begin * hidden, experts.up[e], experts.up_bias, e, count, up + begin * inter);
    }
    kc::expert_activation(gate, up, n * inter, experts.activation, experts.swiglu_alpha, experts.swiglu_limit,
                          stream_);
    for (int32_t e = 0; e < experts.num_experts; ++e) {
      const int64_t begin = bounds[static_cast<size_t>(e)];
      const int64_t count = bounds[static_cast<size_t>(e) + 1] - begin;
      if (count == 0) continue;
      linear(gate + begin * inter, experts.down[e], experts.down_bias, e, count, expert_out + begin * hidden);
    }
    kc::scatter_add_weighted(expert_out, slot_rows, n, expert_weights, top_k, j, hidden, out, stream_);
  }
  allocator_.deallocate(device_rows);
  if (expert_token_counts != nullptr) {
    void* delta = allocator_.allocate(counts.size() * sizeof(int64_t));
    staging_->to_device(delta, counts.data(), counts.size() * sizeof(int64_t));
    kc::add_counts(expert_token_counts, static_cast<const int64_t*>(delta), experts.num_experts, stream_);
    allocator_.deallocate(delta);
  }
}

}  // namespace deepinfer
