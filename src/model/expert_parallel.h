// Expert parallelism inside a model (DP attention, EP experts, as the seeds run DeepSeek's MoE):
// every rank runs the whole attention over its own requests; each MoE layer holds only the experts
// its placement puts on this rank and exchanges token rows with the other ranks at every forward.
// The ranks therefore run their forwards together: each forward starts with a vote, and a rank
// without work joins the others' forwards through CausalLM::run_idle_step. A forward is the
// decoder's or, under speculative decoding, the draft module's (GroupForward): the vote picks one
// kind per round, and a rank that wanted the other joins this round without tokens and votes again. Between forwards the
// ranks may re-place the experts by their recorded load (EPLB, model/expert_rebalance.h).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/result.h"
#include "parallel/eplb.h"
#include "parallel/expert_load.h"
#include "parallel/expert_placement.h"
#include "runtime/comm/communicator.h"
#include "runtime/comm/device_exchange.h"

namespace deepinfer {

// The forwards a round of the group can run, in the order the vote prefers them.
enum class GroupForward : int32_t { kDecoder = 0, kDraftModule = 1 };

// `--eplb-interval`: forward rounds between re-placements (the seeds' 10000).
constexpr int64_t kDefaultEplbIntervalSteps = 10'000;

struct ExpertParallelism {
  std::shared_ptr<Communicator> group;
  // The i-th MoE layer's placement, MoE layers counted in the order they run (the draft module's
  // after the decoder's). Layers past the end get ExpertPlacement::contiguous with
  // num_redundant_experts extra slots.
  std::vector<ExpertPlacement> placements;
  int32_t num_redundant_experts = 0;
  // How the MoE layers' rows travel (--expert-parallel-transport; runtime/comm/device_exchange.h).
  ExchangeTransport transport = ExchangeTransport::kAuto;
  // The rows' element types (--expert-parallel-payload).
  ExchangePayload payload;
  // EPLB while running (model/expert_rebalance.h): the load of the last eplb_window_steps forward
  // rounds; a re-placement every eplb_interval_steps rounds (0: only on request) by eplb_policy.
  int32_t eplb_window_steps = kDefaultEplbWindowSteps;
  int64_t eplb_interval_steps = kDefaultEplbIntervalSteps;
  EplbPolicy eplb_policy = EplbPolicy::kPeakAware;
  // Not empty: rank 0 writes every MoE layer's placement there (the --expert-placement format) at
  // load and after each re-placement.
  std::string placement_out_file;

  // The placement of MoE layer moe_index, checked against the layer and the group.
  Result<ExpertPlacement> placement_for(int32_t moe_index, int32_t num_experts) const;

  // The vote every forward round of an expert-parallel model starts with, on every rank: this
  // rank's token count (0 for run_idle_step, whose kind is then ignored), the kind of forward they
  // are for, and whether it asks for a re-placement.
  struct Vote {
    int64_t max_tokens = 0;  // the largest count over the ranks (0: no rank has a forward this round)
    bool rebalance = false;  // some rank asked for a re-placement
    // The round's forward: the first kind, in GroupForward order, that a rank with tokens asked for.
    GroupForward kind = GroupForward::kDecoder;
  };
  Vote vote(int64_t num_tokens, GroupForward kind = GroupForward::kDecoder, bool request_rebalance = false) const;

  // Rounds whose max_tokens is at most this (and not 0) exchange fixed-size blocks planned on the
  // device (MoeLayer, model/layers/moe_parallel.cpp); 0: none do.
  int64_t fixed_dispatch_tokens = 256;
  // The last vote's result, which the MoE layers of the round read: the same on every rank.
  std::shared_ptr<Vote> current_round = std::make_shared<Vote>();
  // Whether current_round's MoE layers exchange fixed-size blocks (fixed_dispatch_tokens).
  bool fixed_round() const {
    return current_round->max_tokens > 0 && current_round->max_tokens <= fixed_dispatch_tokens;
  }
};

}  // namespace deepinfer
