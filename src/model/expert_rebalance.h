// EPLB while the model runs (the seeds' expert load balancing, issue 23): every MoE layer's routing
// is recorded per forward round over a sliding window, and every eplb_interval_steps rounds (or on
// request) the ranks of an expert-parallel group re-place the experts by that load and switch every
// layer between two rounds. Lives in the model, so generate, score and serve all get it.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

#include "model/expert_parallel.h"
#include "model/layers/moe.h"
#include "model/model.h"
#include "parallel/expert_load.h"

namespace deepinfer {

// One per expert-parallel model. Every rank calls start_round at the same rounds (each forward
// round of the group begins with it), so every rank records the same steps and re-places at the
// same round. A re-placement, between two rounds:
//   1. every rank sums its window with the others' (all_reduce_sum), so all see the group's load;
//   2. MoE layer i's new placement is computed by rank i % world (rebalance_layer with the
//      configured policy; each rank a share of the layers) and the tables are all-gathered;
//   3. every rank loads the experts its slots now hold and does not: from the checkpoint, through
//      the loaders the model was loaded with (every rank maps the whole model directory; a moved
//      expert's bytes are the checkpoint's, so this equals a copy from the rank that held it,
//      without a transfer between ranks or a second copy of the layer during the move);
//   4. the ranks agree that every load succeeded (else all keep the old placement), then every
//      layer installs its new experts and gives back those it no longer holds.
// No forward ever sees a half-moved layer. Not thread-safe, except request().
class ExpertRebalancer {
 public:
  // moved: the MoE layers the forward runs (the decoder's, in order), which re-placements move;
  // fixed: the others (the draft module's, idle under expert parallelism), only written to
  // placement_out_file after them. The layers must outlive this; source is where experts load from.
  static Result<std::unique_ptr<ExpertRebalancer>> create(ModelSource source, std::vector<MoeLayer*> moved,
                                                          std::vector<const MoeLayer*> fixed);

  // Asks for a re-placement at the start of the group's next forward round (the request travels in
  // that round's vote, so every rank re-places there). Thread-safe.
  void request() { requested_.store(true, std::memory_order_relaxed); }
  // Starts a round: records the last round's routing (when it ran a forward), votes with
  // num_tokens for a forward of `kind`, and re-places first when the vote or the interval asks for
  // it. Returns the vote (max_tokens 0: no rank has a forward; such a round is not a step of the
  // window). Throws DeviceError when the group is lost.
  ExpertParallelism::Vote start_round(int64_t num_tokens, GroupForward kind);

  int64_t num_rounds() const { return num_rounds_; }  // rounds with a forward so far
  int32_t num_rebalances() const { return num_rebalances_; }

 private:
  ExpertRebalancer(ModelSource source, std::vector<MoeLayer*> moved, std::vector<const MoeLayer*> fixed,
                   int32_t num_experts);
  void record_round();
  void rebalance();
  // The group's windows: every rank's recorder summed.
  std::vector<ExpertLoadWindow> group_windows() const;
  // New placements for every moved layer, each computed on one rank and all-gathered; an error
  // (the same on every rank) when a rank's policy failed.
  Result<std::vector<ExpertPlacement>> compute_placements(const std::vector<ExpertLoadWindow>& windows) const;
  void write_placements() const;

  ModelSource source_;
  const ExpertParallelism& expert_parallel_;  // source_.expert_parallel's
  std::vector<MoeLayer*> moved_;
  std::vector<const MoeLayer*> fixed_;
  ExpertLoadRecorder recorder_;
  // Rounds planned on the device count each moved layer's routed tokens here ([moved layers,
  // num_experts] int64, MoeLayer::count_routed_on_device), read back once a recorded round;
  // routed_seen_ holds the totals read last time.
  DeviceBuffer routed_on_device_;
  std::vector<int64_t> routed_seen_;
  std::atomic<bool> requested_{false};
  bool round_pending_ = false;  // the last round ran a forward whose routing is not recorded yet
  int64_t num_rounds_ = 0;
  int64_t last_rebalance_round_ = 0;
  int32_t num_rebalances_ = 0;
};

}  // namespace deepinfer
