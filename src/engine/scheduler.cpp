// Continuous batching with chunked prefill, preemption by recompute and policy-ordered queues.
#include "engine/scheduler.h"

#include <algorithm>

#include "core/check.h"

namespace deepinfer {
namespace {

template <typename Container>
void insert_ordered(Container& queue, Request* request, const SchedulingPolicy& policy) {
  const auto at = std::upper_bound(queue.begin(), queue.end(), request,
                                   [&](const Request* a, const Request* b) { return policy.runs_before(*a, *b); });
  queue.insert(at, request);
}

template <typename Container>
bool erase_from(Container& queue, const Request* request) {
  const auto it = std::find(queue.begin(), queue.end(), request);
  if (it == queue.end()) return false;
  queue.erase(it);
  return true;
}

// The tokens r may run from num_computed on: all the rest, except that a sequence awaiting its
// grammar stops before the token it samples from (with chunked prefill off: runs nothing), and
// one sitting out a step scheduled ahead runs nothing.
int32_t num_runnable_tokens(const Request& r, int32_t num_computed, bool chunked_prefill) {
  if (r.sits_out_step_ahead || (r.awaiting_grammar && !chunked_prefill)) return 0;
  return r.num_tokens() - num_computed - (r.awaiting_grammar ? 1 : 0);
}

}  // namespace

Scheduler::Scheduler(const SchedulerConfig& config, KvCacheManager& kv_cache)
    : config_(config), kv_cache_(kv_cache) {
  if (config.priority_policy) {
    policy_ = std::make_unique<PriorityPolicy>();
  } else {
    policy_ = std::make_unique<FcfsPolicy>();
  }
}

void Scheduler::add(Request* request) {
  request->status = RequestStatus::kWaiting;
  insert_ordered(waiting_, request, *policy_);
}

void Scheduler::add_running(Request* request) {
  request->status = RequestStatus::kRunning;
  insert_ordered(running_, request, *policy_);
}

void Scheduler::remove(Request* request) {
  if (!erase_from(waiting_, request)) erase_from(running_, request);
  kv_cache_.free(request->seq_id);
}

SchedulerOutput Scheduler::schedule() {
  SchedulerOutput out;
  int32_t budget = config_.max_num_batched_tokens;
  schedule_running(budget, out);
  // A step that had to preempt admits nobody: the pool is the bottleneck.
  if (out.preempted.empty()) admit_waiting(budget, out);
  out.num_batched_tokens = config_.max_num_batched_tokens - budget;
  return out;
}

void Scheduler::preempt(Request* victim, SchedulerOutput& out) {
  kv_cache_.free(victim->seq_id);
  victim->num_computed_tokens = 0;
  ++victim->num_preemptions;
  erase_from(running_, victim);
  insert_ordered(waiting_, victim, *policy_);
  victim->status = RequestStatus::kWaiting;
  out.preempted.push_back(victim);
}

bool Scheduler::schedule_running(int32_t& budget, SchedulerOutput& out) {
  size_t i = 0;
  while (i < running_.size() && budget > 0) {
    Request* request = running_[i];
    const int32_t remaining =
        num_runnable_tokens(*request, request->num_computed_tokens, config_.enable_chunked_prefill);
    DI_CHECK(remaining > 0 || request->awaiting_grammar || request->sits_out_step_ahead,
             "running sequence " << request->seq_id << " has nothing to compute");
    if (remaining <= 0) {  // it waits for its grammar, or sits out the step scheduled ahead
      ++i;
      continue;
    }
    // A decode verifies its drafts while the budget and the free blocks allow, before anyone is
    // preempted for them.
    int32_t num_drafts = remaining == 1 ? std::clamp(request->num_verify_drafts, 0, budget - 1) : 0;
    const int32_t num_tokens =
        request->chunk_end(request->num_computed_tokens, request->num_computed_tokens + std::min(remaining, budget)) -
        request->num_computed_tokens;
    // An image that does not fit what is left of the budget waits for a step it leads (whose whole
    // budget holds any image: add_request checks), so no step outgrows the memory plan's.
    if (num_tokens > budget && !out.scheduled.empty()) {
      ++i;
      continue;
    }
    bool preempted_self = false;
    int32_t ignored_cached = 0;
    const auto allocate = [&] {
      return kv_cache_.allocate(request->seq_id, request->cache_tokens(),
                                request->num_computed_tokens + num_tokens + num_drafts, request->cache_salt,
                                &ignored_cached);
    };
    while (!allocate()) {
      if (num_drafts > 0) {
        num_drafts = 0;
        continue;
      }
      Request* victim = running_.back();
      preempt(victim, out);
      if (victim == request) {
        preempted_self = true;
        break;
      }
    }
    request->num_verify_drafts = num_drafts;
    const int32_t num_new = num_tokens + num_drafts;
    if (preempted_self) break;  // it was the lowest-ranked: nothing after it remains
    out.scheduled.push_back({request, num_new, num_drafts});
    budget -= num_new;
    ++i;
  }
  return out.preempted.empty();
}

void Scheduler::admit_waiting(int32_t& budget, SchedulerOutput& out) {
  size_t i = 0;
  while (i < waiting_.size() && budget > 0 && running_.size() < static_cast<size_t>(config_.max_num_seqs)) {
    Request* request = waiting_[i];
    const std::span<const int32_t> tokens = request->cache_tokens();
    if (!request->prefix_hashes) request->prefix_hashes = kv_cache_.new_hash_chain(request->cache_salt);
    const int32_t cached = kv_cache_.num_cached_tokens(tokens, *request->prefix_hashes);
    const int32_t remaining = num_runnable_tokens(*request, cached, config_.enable_chunked_prefill);
    if (remaining <= 0) {  // waits for its grammar; those behind it may start
      ++i;
      continue;
    }
    const int32_t num_new = request->chunk_end(cached, cached + std::min(remaining, budget)) - cached;
    if (num_new < remaining && !config_.enable_chunked_prefill) break;
    if (num_new > budget && !out.scheduled.empty()) break;  // an image that does not fit, as above
    int32_t taken_cached = 0;
    if (!kv_cache_.allocate(request->seq_id, tokens, cached + num_new, *request->prefix_hashes, &taken_cached)) break;
    DI_CHECK(taken_cached == cached, "prefix cache changed between lookup and allocation");
    waiting_.erase(waiting_.begin() + static_cast<std::ptrdiff_t>(i));
    request->num_computed_tokens = cached;
    if (request->num_preemptions == 0) request->num_cached_tokens = cached;
    request->status = RequestStatus::kRunning;
    insert_ordered(running_, request, *policy_);
    out.scheduled.push_back({request, num_new, 0});
    budget -= num_new;
  }
}

}  // namespace deepinfer
