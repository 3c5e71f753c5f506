// ExpertPlacement: which logical expert each physical expert slot of one MoE layer holds and
// which rank owns the slot (with redundant copies of hot experts), and its JSON file form
// (`--expert-placement FILE`). Host bookkeeping only; plain values, safe to copy between threads.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/result.h"

namespace deepinfer {

// Where one MoE layer's experts live: physical expert slot p holds logical expert
// physical_to_logical[p] and sits on rank p / slots_per_rank.
struct ExpertPlacement {
  int32_t num_logical_experts = 0;
  int32_t num_ranks = 1;
  int32_t slots_per_rank = 0;                 // physical experts per rank
  std::vector<int32_t> physical_to_logical;   // [num_ranks * slots_per_rank]

  int32_t num_physical() const { return num_ranks * slots_per_rank; }
  int32_t num_redundant() const { return num_physical() - num_logical_experts; }
  int32_t rank_of(int32_t physical) const { return physical / slots_per_rank; }
  // For each logical expert, its physical slots in ascending order.
  std::vector<std::vector<int32_t>> replicas() const;
  // For each logical expert, how many physical slots hold it.
  std::vector<int32_t> replica_counts() const;
  // The slots whose expert their rank did not hold in before (same ranks and slots per rank): the
  // experts a re-placement from before makes ranks load.
  int32_t experts_gained_from(const ExpertPlacement& before) const;
  // Error naming what is wrong: sizes, ids out of range, a logical expert with no slot.
  Result<void> validate() const;
  // The placement before any statistics: logical experts in order on consecutive slots, then
  // num_redundant extra copies of experts 0, 1, ... (error when num_logical + num_redundant is
  // not a multiple of num_ranks).
  static Result<ExpertPlacement> contiguous(int32_t num_logical, int32_t num_ranks, int32_t num_redundant);

  bool operator==(const ExpertPlacement&) const = default;
};

// A model's placements, one per MoE layer in the order the layers run (the i-th entry is the
// i-th MoE layer, dense layers not counted). The file form:
//   {"format": "deepinfer-expert-placement", "version": 1,
//    "moe_layers": [{"num_logical_experts": 8, "num_ranks": 2, "slots_per_rank": 5,
//                    "physical_to_logical": [0, 1, ...]}, ...]}
std::string placements_to_json(const std::vector<ExpertPlacement>& placements);
// Parses and validates every layer; errors name the layer and the field.
Result<std::vector<ExpertPlacement>> placements_from_json(std::string_view text);
Result<void> save_placements(const std::string& path, const std::vector<ExpertPlacement>& placements);
Result<std::vector<ExpertPlacement>> load_placements(const std::string& path);

}  // namespace deepinfer
