// ExpertParallelism: the placement each MoE layer follows, and the vote that starts every forward.
#include "model/expert_parallel.h"

#include <string>

namespace deepinfer {

Result<ExpertPlacement> ExpertParallelism::placement_for(int32_t moe_index, int32_t num_experts) const {
  const int32_t world = group->world_size();
  if (static_cast<size_t>(moe_index) >= placements.size()) {
    auto placement = ExpertPlacement::contiguous(num_experts, world, num_redundant_experts);
    if (!placement.ok()) {
      return Error{"expert parallelism over " + std::to_string(world) + " ranks with " +
                   std::to_string(num_redundant_experts) + " redundant experts: " + placement.error().message};
    }
    return placement;
  }
  const ExpertPlacement& placement = placements[static_cast<size_t>(moe_index)];
  if (placement.num_logical_experts != num_experts || placement.num_ranks != world) {
    return Error{"the expert placement of MoE layer " + std::to_string(moe_index) + " is for " +
                 std::to_string(placement.num_logical_experts) + " experts on " + std::to_string(placement.num_ranks) +
                 " ranks, but the layer has " + std::to_string(num_experts) + " experts and the group " +
                 std::to_string(world) + " ranks"};
  }
  if (auto valid = placement.validate(); !valid.ok()) {
    return Error{"the expert placement of MoE layer " + std::to_string(moe_index) + ": " + valid.error().message};
  }
  return placement;
}

ExpertParallelism::Vote ExpertParallelism::vote(int64_t num_tokens, GroupForward kind, bool request_rebalance) const {
  // The kind as a preference the maximum picks: the first kind scores highest, no forward 0.
  constexpr int64_t kNumKinds = 2;
  const int64_t preference = num_tokens > 0 ? kNumKinds - static_cast<int64_t>(kind) : 0;
  std::vector<int64_t> votes = {num_tokens, request_rebalance ? 1 : 0, preference};
  group->all_reduce_max(votes);
  const auto chosen = votes[2] > 0 ? static_cast<GroupForward>(kNumKinds - votes[2]) : GroupForward::kDecoder;
  *current_round = {votes[0], votes[1] != 0, chosen};
  return *current_round;
}

}  // namespace deepinfer
