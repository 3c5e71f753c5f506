// DeepSeek's published EPLB policy (github.com/deepseek-ai/EPLB, eplb.py), reimplemented from its
// algorithm to compare ours against: replicate the expert with the largest load per replica one
// slot at a time, then pack equal-count bins greedily by total load (heaviest item to the lightest
// bin with room). Hierarchical when num_nodes divides num_groups: expert groups are packed to
// nodes first, then replication and packing happen inside each node; global otherwise.
// Arithmetic is float32 like theirs, so on inputs without ties between experts the tables come
// out as theirs (tests/parallel/test_eplb.cpp checks against their own output).
#pragma once

#include <cstdint>
#include <vector>

#include "core/result.h"
#include "parallel/expert_placement.h"

namespace deepinfer {

// One MoE layer's result, in their terms.
struct DeepSeekEplbTables {
  std::vector<int32_t> physical_to_logical;               // [num_physical] their phy2log
  // [num_logical][logical_count[e]] the physical slot of each replica, in replica order (their
  // log2phy without its -1 padding).
  std::vector<std::vector<int32_t>> logical_to_physical;
  std::vector<int32_t> logical_count;                     // [num_logical] their logcnt
};

// Their bin packing: items [n] with weights, into num_packs packs of exactly n / num_packs items.
// pack_of[i] and slot_in_pack[i] say where item i went. One item per pack keeps the order.
struct BalancedPacking {
  std::vector<int32_t> pack_of;
  std::vector<int32_t> slot_in_pack;
};
BalancedPacking deepseek_balanced_packing(const std::vector<float>& weights, int32_t num_packs);

// Their replication: num_physical slots for weights.size() logical experts; slot e < num_logical
// holds expert e, each further slot a copy of the expert with the largest weight per replica.
struct Replication {
  std::vector<int32_t> physical_to_logical;  // [num_physical]
  std::vector<int32_t> replica_rank;         // [num_physical] which copy of its expert the slot is
  std::vector<int32_t> logical_count;        // [num_logical]
};
Replication deepseek_replicate_experts(const std::vector<float>& weights, int32_t num_physical);

// Their rebalance_experts for one layer: weights [num_logical] (load statistics, e.g. tokens over
// the window). Errors (instead of their asserts) when num_physical is not a multiple of num_gpus,
// num_gpus of num_nodes, num_logical of num_groups, or num_physical < num_logical.
Result<DeepSeekEplbTables> deepseek_rebalance_experts(const std::vector<float>& weights, int32_t num_physical,
                                                      int32_t num_groups, int32_t num_nodes, int32_t num_gpus);

// The same as an ExpertPlacement (num_ranks = num_gpus).
Result<ExpertPlacement> deepseek_placement(const std::vector<float>& weights, int32_t num_physical, int32_t num_groups,
                                           int32_t num_nodes, int32_t num_gpus);

}  // namespace deepinfer
