// The mixture-of-experts feed-forward block: router, routed experts (grouped per expert, one GEMM
// per active expert), optional shared experts, and per-expert token counters for load balancing.
// One options struct covers DeepSeek-V2/V3, Qwen3-MoE, Mixtral and GPT-OSS. Under expert
// parallelism the layer holds only this rank's experts and can switch to a new placement between
// forwards (EPLB, model/expert_rebalance.h).
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "model/expert_parallel.h"
#include "model/layers/linear.h"
#include "model/layers/mlp.h"
#include "parallel/expert_placement.h"
#include "runtime/comm/communicator.h"
#include "runtime/comm/device_exchange.h"

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

// One routed expert's weights as the kernels read them. Views into the mapped checkpoint need
// nothing more; values computed at load (dequantised FP8, GPT-OSS's transposed matrices) live in the
// expert's own arena, freed with the last slot that holds the expert.
struct LoadedExpert {
  int32_t expert_id = 0;                              // the logical expert
  kernels::WeightView gate, up, down;                 // [inter, hidden], [inter, hidden], [hidden, inter]
  kernels::WeightView gate_bias, up_bias, down_bias;  // [inter], [inter], [hidden]; data == nullptr: none
  std::shared_ptr<WeightArena> arena;                 // null when every view reads the mapped file
};

// A placement whose experts are loaded but not in use yet (MoeLayer::stage_placement).
struct StagedPlacement {
  ExpertPlacement placement;
  std::vector<std::shared_ptr<const LoadedExpert>> experts;  // [slots_per_rank]: this rank's slots in order
  int32_t num_loaded = 0;  // experts read from the checkpoint (the others were held already)
};

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
  bool expert_parallel() const { return parallel_ != nullptr; }
  const ExpertPlacement& placement() const { return placement_; }
  // Bytes of one routed expert's weights and biases (the mean over the experts).
  int64_t expert_bytes() const;
  // Scratch floats forward needs for num_tokens tokens.
  int64_t scratch_floats(int64_t num_tokens) const;
  // Bytes one token's forward reads: router, shared experts and top_k routed experts.
  int64_t weight_bytes() const;
  // x: [num_tokens, hidden] normalised input; out: [num_tokens, hidden]. Under expert parallelism
  // every rank of the group calls it in the same round (num_tokens may be 0), and a round of fixed
  // blocks leaves its exchanges on the stream: the caller waits for them with the exchange's
  // wait_enqueued before the host waits on the stream.
  void forward(Backend& backend, const float* x, int64_t num_tokens, float* scratch, float* out) const;
  // Whether forward over num_tokens tokens reads the expert grouping back to the host
  // (Backend::moe_step_reads_back), which a captured graph cannot do.
  bool step_reads_back(Backend& backend, int64_t num_tokens) const {
    return backend.moe_step_reads_back(num_tokens, experts_view());
  }
  // Tokens routed to each loaded expert since load or the last reset: [num_experts], or under
  // expert parallelism [slots_per_rank], the rows each of this rank's slots ran (from every rank).
  std::vector<int64_t> expert_token_counts(Backend& backend) const;
  // Host bytes the held experts keep: copies made at load (transposed or de-interleaved weights)
  // that the backend's views read; zero where the backend has its own copies (a device's).
  int64_t host_copy_bytes() const;
  void reset_expert_token_counts(Backend& backend) const;

  // Expert parallelism, EPLB (model/expert_rebalance.h). Tokens this rank routed to each logical
  // expert ([num_experts]) since the last call, which zeroes them.
  std::vector<int64_t> take_routed_tokens();
  // Where rounds planned on the device (fixed-size blocks) count this rank's routed tokens per
  // logical expert instead: [num_experts] int64 of the backend's memory, added to and never reset
  // (the reader takes differences); null: such rounds count nothing.
  void count_routed_on_device(int64_t* counter) { routed_counter_ = counter; }
  // The weights of this rank's slots under placement (same experts, ranks and slots per rank as
  // the layer's): experts the layer holds already are shared, the others read from the checkpoint
  // through the loaders load uses. Changes nothing; errors name the tensor.
  Result<StagedPlacement> stage_placement(const ModelSource& source, const ExpertPlacement& placement) const;
  // Makes a staged placement the layer's: the next forward follows it. Experts no longer held are
  // given back (Backend::release_weight); the per-slot token counters restart from zero. Call
  // between forwards only.
  void install_placement(Backend& backend, StagedPlacement staged);
  // Drops a staged placement instead (another rank could not load its share): the experts it
  // loaded are given back; the layer is unchanged.
  void discard_placement(Backend& backend, StagedPlacement staged) const;

 private:
  // Where the routed experts' weights are in the checkpoint.
  enum class ExpertSource : uint8_t { kPerExpert, kFused, kGptOss };
  // One expert's weights from the checkpoint (the views of its source's layout).
  Result<LoadedExpert> load_expert(const ModelSource& source, int32_t expert) const;
  Result<void> load_per_expert(const ModelSource& source, LoadedExpert& expert) const;
  Result<void> load_fused_expert(const ModelSource& source, LoadedExpert& expert) const;
  Result<void> load_gpt_oss_expert(const ModelSource& source, LoadedExpert& expert) const;
  // GPT-OSS's MXFP4 experts kept packed (Backend::reads_packed_weights); the biases as read.
  Result<void> load_packed_gpt_oss_expert(const ModelSource& source, LoadedExpert& expert,
                                          const std::vector<float>& gate_up_bias,
                                          const std::vector<float>& down_bias) const;
  // The experts of this rank's slots under placement, reusing those in held (one load per expert).
  Result<StagedPlacement> load_slots(const ModelSource& source, const ExpertPlacement& placement,
                                     const std::vector<std::shared_ptr<const LoadedExpert>>& held) const;
  // experts_ and the views the kernels read (gate_, up_, ...) from the slots' experts.
  void set_experts(std::vector<std::shared_ptr<const LoadedExpert>> experts);
  kernels::MoeExperts experts_view() const;
  // The logical experts whose weights this rank holds, in slot order: all of them, or this rank's
  // slots under placement.
  std::vector<int32_t> slot_experts(const ExpertPlacement& placement) const;
  // The routed experts under expert parallelism (moe_parallel.cpp): every slot's token row goes to
  // the rank of one replica of its expert, comes back as that expert's output, and is combined here.
  void forward_expert_parallel(Backend& backend, const float* x, int64_t num_tokens, const int32_t* expert_ids,
                               const float* expert_weights, float* out) const;
  // The same with every rank sending every other room rows (round_tokens tokens' worth), planned
  // on the device by Backend::moe_dispatch: no host round trip between the router and the experts.
  void forward_fixed_dispatch(Backend& backend, const float* x, int64_t num_tokens, const int32_t* expert_ids,
                              const float* expert_weights, int64_t round_tokens, float* out) const;
  // replica_offsets_ and replica_slots_ from placement_.
  void upload_replicas(Backend& backend);

  std::string prefix_;  // e.g. "model.layers.3.mlp"
  ExpertSource expert_source_ = ExpertSource::kPerExpert;
  std::string gate_name_, up_name_, down_name_;  // per-expert tensor names (kPerExpert)
  int64_t hidden_ = 0;
  int64_t intermediate_ = 0;
  kernels::MoeRouting routing_;
  kernels::ExpertActivation activation_ = kernels::ExpertActivation::kSiluGated;
  float swiglu_alpha_ = 1.702f;
  float swiglu_limit_ = 7.0f;
  Linear router_;                          // [num_experts, hidden]
  kernels::WeightView selection_bias_;     // [num_experts] or data == nullptr
  std::vector<std::shared_ptr<const LoadedExpert>> experts_;  // [held slots]: the slots' experts
  // The views experts_view hands the kernels, one per held slot (rebuilt by set_experts).
  std::vector<kernels::WeightView> gate_, up_, down_;              // [held slots] each
  std::vector<kernels::WeightView> gate_bias_, up_bias_, down_bias_;  // empty when the experts have none
  std::optional<GatedMlp> shared_;
  DeviceBuffer token_counts_;  // [held slots] int64
  // Expert parallelism: the group, its settings (payload, fixed_dispatch_tokens) and the round's
  // vote; null without it.
  std::shared_ptr<const ExpertParallelism> parallel_;
  std::shared_ptr<DeviceExchange> exchange_;  // with parallel_: the token rows' way (ModelSource::expert_exchange)
  ExpertPlacement placement_;
  mutable std::vector<int64_t> routed_tokens_;  // [num_experts] under expert parallelism (take_routed_tokens)
  // Under expert parallelism: placement_ as the device's dispatch reads it (kernels::ExpertDispatch),
  // and where fixed-size rounds count their load.
  DeviceBuffer replica_offsets_;                       // [num_experts + 1] int32
  DeviceBuffer replica_slots_;                         // [num_physical] int32
  int64_t* routed_counter_ = nullptr;                  // count_routed_on_device's
  mutable DeviceBuffer ones_;  // float 1s, the fixed-size rounds' expert weights (grown on demand)
};

}  // namespace deepinfer
