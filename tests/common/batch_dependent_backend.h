// Negative controls for the batch-invariance tests: a backend whose attention or MoE expert
// outputs change in their last bits once a batch is larger than a threshold, as a reduction
// whose order depends on the batch would. A batch-invariance comparison run over it must find
// the difference; if it does not, the comparison could not catch a real regression.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>

#include "runtime/forwarding_backend.h"

namespace deepinfer::testing {

class BatchDependentBackend final : public ForwardingBackend {
 public:
  // op: "paged_attention" (batches of more than min_rows sequences) or "moe_experts" (more
  // than min_rows tokens).
  BatchDependentBackend(std::unique_ptr<Backend> inner, std::string op, int64_t min_rows)
      : ForwardingBackend(std::move(inner)), op_(std::move(op)), min_rows_(min_rows) {}

  int64_t num_perturbed() const { return num_perturbed_; }

  void paged_attention(const float* q, const void* k_cache, const void* v_cache, const kernels::PagedBatch& batch,
                       const kernels::AttentionParams& params, float* out) override {
    inner().paged_attention(q, k_cache, v_cache, batch, params, out);
    if (op_ == "paged_attention" && batch.num_seqs > min_rows_) {
      perturb(out, static_cast<int64_t>(batch.num_tokens) * params.num_heads * params.head_dim);
    }
  }
  void attention_with_front_end(const kernels::AttentionFrontEnd& f, const kernels::PagedBatch& batch,
                                const kernels::AttentionParams& params, float* out) override {
    inner().attention_with_front_end(f, batch, params, out);
    if (op_ == "paged_attention" && batch.num_seqs > min_rows_) {
      perturb(out, static_cast<int64_t>(batch.num_tokens) * params.num_heads * params.head_dim);
    }
  }
  void moe_experts(const float* x, int64_t num_tokens, const int32_t* expert_ids, const float* expert_weights,
                   const kernels::MoeExperts& experts, float* workspace, int64_t* expert_token_counts,
                   float* out) override {
    inner().moe_experts(x, num_tokens, expert_ids, expert_weights, experts, workspace, expert_token_counts, out);
    if (op_ == "moe_experts" && num_tokens > min_rows_) perturb(out, num_tokens * experts.hidden);
  }

 private:
  // An ulp-scale change, the size of a different summation order's rounding. Attention writes
  // [num_tokens, num_heads, head_dim] (MLA's latent rows too), the experts [num_tokens, hidden].
  void perturb(float* values, int64_t count) {
    inner().scale(values, count, 1.0f + 0x1p-20f, values);
    ++num_perturbed_;
  }

  std::string op_;
  int64_t min_rows_;
  int64_t num_perturbed_ = 0;
};

}  // namespace deepinfer::testing
