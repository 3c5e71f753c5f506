// The mixture-of-experts feed-forward block: router, routed experts (grouped per expert, one GEMM
// per active expert), optional shared experts, and per-expert token counters for load balancing.
// One options struct covers DeepSeek-V2/V3, Qwen3-MoE, Mixtral and GPT-OSS.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "model/layers/linear.h"
#include "model/layers/mlp.h"
#include "parallel/expert_placement.h"
#include "runtime/comm/communicator.h"

namespace deepinfer {

// How the routed experts' weights are stored in the checkpoint. kAuto finds per-expert tensors
// (published checkpoints: <prefix>.experts.<e>.<gate|up|down>.weight) or transformers 5's fused
// ones (<prefix>.experts.gate_up_proj [E, 2I, H] with gate rows first, .down_proj [E, H, I]).
enum class ExpertLayout : uint8_t {
  kAuto,
  // GPT-OSS: gate_up_proj [E, H, 2I] with gate/up interleaved along the last dim, its bias
  // gate_up_proj_bias [E, 2I]; down_proj [E, I, H], down_proj_bias [E, H]. Transposed at load.
  kGptOss,
};

struct MoeOptions {
  // num_experts, top_k, scoring, grouped top-k (num_groups = n_group, top_groups = topk_group,
  // group_score), normalize (norm_topk_prob), scaling (routed_scaling_factor).
  kernels::MoeRouting routing;
  int64_t intermediate_size = 0;  // per routed expert (moe_intermediate_size)
  std::string router_name = "gate";  // <prefix>.<router_name>.weight [num_experts, hidden]
  bool router_bias = false;          // GPT-OSS
  // DeepSeek-V3: <prefix>.<router_name>.e_score_correction_bias [num_experts] shifts expert choice only.
  bool selection_bias = false;
  // Shared experts: one gated MLP at <prefix>.<shared_name> of width shared_intermediate_size,
  // added to every token's routed output (DeepSeek: n_shared_experts * moe_intermediate_size).
  int64_t shared_intermediate_size = 0;  // 0: none
  std::string shared_name = "shared_experts";
  // Per-expert tensor names: gate_proj/up_proj/down_proj, or w1/w3/w2 (Mixtral).
  std::string gate_name = "gate_proj";
  std::string up_name = "up_proj";
  std::string down_name = "down_proj";
  ExpertLayout layout = ExpertLayout::kAuto;
  kernels::ExpertActivation activation = kernels::ExpertActivation::kSiluGated;
  float swiglu_alpha = 1.702f;  // kClampedSwiglu only
  float swiglu_limit = 7.0f;
};

// The routing, expert width and shared experts config.json describes (names and layout keep
// their defaults: an architecture file adjusts those).
MoeOptions moe_options_from_config(const MoeConfig& config);

class MoeLayer {
 public:
  // prefix: e.g. "model.layers.3.mlp". Errors name the missing or misshapen tensor. Under expert
  // parallelism (source.expert_parallel) only the experts of this rank's slots are loaded, by the
  // placement of MoE layer moe_index.
  static Result<MoeLayer> load(const ModelSource& source, const std::string& prefix, int64_t hidden,
                               const MoeOptions& options, int32_t moe_index = 0);

  int32_t num_experts() const { return routing_.num_experts; }
  int32_t top_k() const { return routing_.top_k; }
  // Expert parallelism: the placement this layer's experts follow, and whether it has one.
  bool expert_parallel() const { return group_ != nullptr; }
  const ExpertPlacement& placement() const { return placement_; }
  // Bytes of one routed expert's weights and biases (the mean over the experts).
  int64_t expert_bytes() const;
  // Scratch floats forward needs for num_tokens tokens.
  int64_t scratch_floats(int64_t num_tokens) const;
  // Bytes one token's forward reads: router, shared experts and top_k routed experts.
  int64_t weight_bytes() const;
  // x: [num_tokens, hidden] normalised input; out: [num_tokens, hidden]. Under expert parallelism
  // every rank of the group calls it in the same round (num_tokens may be 0).
  void forward(Backend& backend, const float* x, int64_t num_tokens, float* scratch, float* out) const;
  // Tokens routed to each loaded expert since load or the last reset: [num_experts], or under
  // expert parallelism [slots_per_rank], the rows each of this rank's slots ran (from every rank).
  std::vector<int64_t> expert_token_counts(Backend& backend) const;
  void reset_expert_token_counts(Backend& backend) const;

 private:
  Result<void> load_experts(const ModelSource& source, const std::string& prefix, const MoeOptions& options);
  Result<void> load_fused_experts(const ModelSource& source, const std::string& prefix, const MoeOptions& options);
  Result<void> load_gpt_oss_experts(const ModelSource& source, const std::string& prefix,
                                    const MoeOptions& options);
  kernels::MoeExperts experts_view() const;
  // The logical experts whose weights this rank loads, in slot order: all of them, or this rank's slots.
  std::vector<int32_t> loaded_experts() const;
  // The routed experts under expert parallelism (moe_parallel.cpp): every slot's token row goes to
  // the rank of one replica of its expert, comes back as that expert's output, and is combined here.
  void forward_expert_parallel(Backend& backend, const float* x, int64_t num_tokens, const int32_t* expert_ids,
                               const float* expert_weights, float* out) const;

  int64_t hidden_ = 0;
  int64_t intermediate_ = 0;
  kernels::MoeRouting routing_;
  kernels::ExpertActivation activation_ = kernels::ExpertActivation::kSiluGated;
  float swiglu_alpha_ = 1.702f;
  float swiglu_limit_ = 7.0f;
  Linear router_;                          // [num_experts, hidden]
  kernels::WeightView selection_bias_;     // [num_experts] or data == nullptr
  std::vector<kernels::WeightView> gate_, up_, down_;              // [num_experts] each
  std::vector<kernels::WeightView> gate_bias_, up_bias_, down_bias_;  // empty when the experts have none
  std::optional<GatedMlp> shared_;
  DeviceBuffer token_counts_;  // [loaded experts] int64
  std::shared_ptr<Communicator> group_;  // expert parallelism: the group, or null
  ExpertPlacement placement_;
};

}  // namespace deepinfer
