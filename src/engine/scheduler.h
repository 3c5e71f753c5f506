// Scheduler: continuous batching under a per-step token budget. Running sequences get their
// tokens first (decodes: 1 token plus the drafts it verifies, Request::num_verify_drafts, as far
// as the budget and the blocks allow; unfinished prefills: the next chunk); when blocks run out the
// policy's lowest-ranked running sequence is preempted (its blocks freed, recomputed later).
// Then waiting sequences are admitted in policy order while the budget, max_num_seqs and the
// KV pool allow, each with its prefix-cache hit skipped. Never touches tensors.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <vector>

#include "engine/request.h"
#include "kvcache/kv_cache_manager.h"

namespace deepinfer {

// Orders sequences: who is admitted first, and who is preempted first (the last).
class SchedulingPolicy {
 public:
  virtual ~SchedulingPolicy() = default;
  // True when a should run before b.
  virtual bool runs_before(const Request& a, const Request& b) const = 0;
};

// First come, first served (arrival order).
class FcfsPolicy final : public SchedulingPolicy {
 public:
  bool runs_before(const Request& a, const Request& b) const override { return a.arrival < b.arrival; }
};

// Lower priority value first, then arrival.
class PriorityPolicy final : public SchedulingPolicy {
 public:
  bool runs_before(const Request& a, const Request& b) const override {
    return a.priority != b.priority ? a.priority < b.priority : a.arrival < b.arrival;
  }
};

struct SchedulerConfig {
  int32_t max_num_seqs = 64;
  int32_t max_num_batched_tokens = 2048;  // the per-step token budget
  bool enable_chunked_prefill = true;     // off: a prompt is scheduled whole or not at all
  bool priority_policy = false;           // FCFS when false
};

struct ScheduledSequence {
  Request* request = nullptr;
  // Tokens [num_computed_tokens, + num_new_tokens) run this step; of them the last num_drafts are
  // the request's first drafts (speculative decoding), past its last token.
  int32_t num_new_tokens = 0;
  int32_t num_drafts = 0;
};

struct SchedulerOutput {
  std::vector<ScheduledSequence> scheduled;
  std::vector<Request*> preempted;  // freed this step; back in the waiting queue
  int32_t num_batched_tokens = 0;
  bool empty() const { return scheduled.empty(); }
};

class Scheduler {
 public:
  Scheduler(const SchedulerConfig& config, KvCacheManager& kv_cache);

  // Queues a waiting sequence; the caller keeps ownership and keeps it alive until finished.
  void add(Request* request);
  // Adds a sequence that already holds its blocks and computed tokens (a forked sample, a
  // prefilled request) straight to the running set.
  void add_running(Request* request);
  // Removes a sequence wherever it is and frees its blocks.
  void remove(Request* request);
  // Decides the next step. Mutates: block tables (allocations, preemptions), queues, statuses.
  SchedulerOutput schedule();

  size_t num_waiting() const { return waiting_.size(); }
  size_t num_running() const { return running_.size(); }
  const std::vector<Request*>& running() const { return running_; }

 private:
  void preempt(Request* victim, SchedulerOutput& out);
  bool schedule_running(int32_t& budget, SchedulerOutput& out);
  void admit_waiting(int32_t& budget, SchedulerOutput& out);

  SchedulerConfig config_;
  KvCacheManager& kv_cache_;
  std::unique_ptr<SchedulingPolicy> policy_;
  std::deque<Request*> waiting_;   // kept in policy order
  std::vector<Request*> running_;  // kept in policy order
};

}  // namespace deepinfer
