// Expert parallelism inside a model (DP attention, EP experts, as the seeds run DeepSeek's MoE):
// every rank runs the whole attention over its own requests; each MoE layer holds only the experts
// its placement puts on this rank and exchanges token rows with the other ranks at every forward.
// The ranks therefore run their forwards together: each forward starts with a vote, and a rank
// without work joins the others' forwards through CausalLM::run_idle_step.
#pragma once

#include <memory>
#include <vector>

#include "core/result.h"
#include "parallel/expert_placement.h"
#include "runtime/comm/communicator.h"

namespace deepinfer {

struct ExpertParallelism {
  std::shared_ptr<Communicator> group;
  // The i-th MoE layer's placement, MoE layers counted in the order they run (the draft module's
  // after the decoder's). Layers past the end get ExpertPlacement::contiguous with
  // num_redundant_experts extra slots.
  std::vector<ExpertPlacement> placements;
  int32_t num_redundant_experts = 0;

  // The placement of MoE layer moe_index, checked against the layer and the group.
  Result<ExpertPlacement> placement_for(int32_t moe_index, int32_t num_experts) const;
  // The vote every forward of an expert-parallel model starts with: this rank's token count (0 for
  // run_idle_step); returns the largest over the ranks (0: no rank has a forward this round).
  int64_t vote(int64_t num_tokens) const;
};

}  // namespace deepinfer
