// The event loop of simulate_cluster: arrivals are routed to a prefill instance, which computes
// prompts in budgeted steps; a finished prompt is routed to a decode instance, which steps its
// batch until each request has its output.
#include "cluster/cluster_sim.h"

#include <algorithm>
#include <array>
#include <deque>
#include <list>
#include <optional>
#include <queue>

#include "cluster/length_buckets.h"
#include "cluster/prefix_lru.h"
#include "cluster/sim_request.h"
#include "core/check.h"

namespace deepinfer {
namespace {

struct PrefillInstance {
  explicit PrefillInstance(int64_t cache_blocks) : cache(cache_blocks) {}
  PrefixLru cache;
  std::deque<int32_t> queue;                      // assigned requests in order; the head ones are in the running step
  std::vector<std::pair<int32_t, int64_t>> step;  // (request, new tokens) of the running step
  bool busy = false;
  int64_t queued_tokens = 0;
  double queued_ms = 0;
};

struct DecodeInstance {
  std::vector<int32_t> running;
  std::deque<int32_t> waiting;  // for a batch slot or KV room
  int64_t context_tokens = 0;   // KV the running requests hold now
  int64_t reserved_tokens = 0;  // KV the running requests will hold at their end
  int64_t waiting_tokens = 0;   // the same for the waiting ones
  bool busy = false;
};

enum class EventKind { kPrefillStepDone, kDecodeStepDone };

struct Event {
  double time_ms;
  int64_t sequence;  // ties in time resolve in the order the events were made
  EventKind kind;
  int32_t instance;
  bool operator>(const Event& other) const {
    return time_ms != other.time_ms ? time_ms > other.time_ms : sequence > other.sequence;
  }
};

class Simulation {
 public:
  Simulation(const std::vector<TraceRequest>& trace, const ClusterSimConfig& config, BalancerPolicy& policy,
             ProgressBar* progress)
      : config_(config),
        cost_(config.cost_model),
        policy_(policy),
        progress_(progress),
        store_(config.store_capacity_blocks) {
    for (int32_t i = 0; i < config.num_prefill_instances; ++i) prefill_.emplace_back(config.prefix_cache_blocks);
    decode_.resize(static_cast<size_t>(config.num_decode_instances));
    instances_.prefill_busy_ms.assign(prefill_.size(), 0);
    instances_.decode_generated_tokens.assign(decode_.size(), 0);
    requests_.resize(trace.size());
    for (size_t i = 0; i < trace.size(); ++i) {
      requests_[i].trace = &trace[i];
      requests_[i].arrival_ms = (trace[i].timestamp_ms - trace.front().timestamp_ms) / config.rate_scale;
    }
  }

  ClusterSimResult run() {
    size_t next_arrival = 0;
    while (next_arrival < requests_.size() || !events_.empty()) {
      if (next_arrival < requests_.size() &&
          (events_.empty() || requests_[next_arrival].arrival_ms < events_.top().time_ms)) {
        now_ms_ = requests_[next_arrival].arrival_ms;
        const auto id = static_cast<int32_t>(next_arrival++);
        if (!try_route_prefill(id, /*is_retry=*/false)) held_.push_back(id);
        continue;
      }
      const Event event = events_.top();
      events_.pop();
      now_ms_ = event.time_ms;
      if (event.kind == EventKind::kPrefillStepDone) {
        finish_prefill_step(event.instance);
      } else {
        finish_decode_step(event.instance);
      }
    }
    DI_CHECK(held_.empty(), held_.size() << " requests still held with every instance idle");
    return summarise_cluster_sim(requests_, instances_);
  }

 private:
  // Full blocks of the prompt a later request may reuse; the last token is always computed.
  static int64_t reusable_blocks(const SimRequest& request) {
    return std::min<int64_t>(static_cast<int64_t>(request.trace->block_hashes.size()),
                             (request.trace->input_tokens - 1) / kRoutingBlockTokens);
  }
  // Full blocks the prefill leaves in the cache.
  static int64_t full_blocks_of(const SimRequest& request) {
    return std::min<int64_t>(static_cast<int64_t>(request.trace->block_hashes.size()),
                             request.trace->input_tokens / kRoutingBlockTokens);
  }
  static std::span<const uint64_t> chain(const SimRequest& request, int64_t num_blocks) {
    return std::span<const uint64_t>(request.trace->block_hashes).first(static_cast<size_t>(num_blocks));
  }

  RoutingRequest routing_request(const SimRequest& request, bool is_retry) const {
    RoutingRequest routing;
    routing.now_ms = now_ms_;
    routing.is_retry = is_retry;
    routing.input_tokens = request.trace->input_tokens;
    routing.output_tokens_estimate = config_.output_length_known ? request.trace->output_tokens : 0;
    routing.block_hashes = request.trace->block_hashes;
    if (config_.shared_store) {
      routing.shared_cached_tokens =
          store_.count_leading_blocks(chain(request, reusable_blocks(request))) * kRoutingBlockTokens;
    }
    return routing;
  }

  // False when the policy holds the request.
  bool try_route_prefill(int32_t id, bool is_retry) {
    SimRequest& request = requests_[static_cast<size_t>(id)];
    const RoutingRequest routing = routing_request(request, is_retry);
    std::vector<InstanceLoad> loads(prefill_.size());
    const std::span<const uint64_t> reusable = chain(request, reusable_blocks(request));
    for (size_t i = 0; i < prefill_.size(); ++i) {
      loads[i].queued_prefill_tokens = prefill_[i].queued_tokens;
      loads[i].queued_prefill_ms = prefill_[i].queued_ms;
      if (policy_.reads_cached_prefix()) {
        loads[i].cached_prefix_tokens = prefill_[i].cache.count_leading_blocks(reusable) * kRoutingBlockTokens;
      }
    }
    const std::optional<size_t> choice = policy_.choose_prefill(routing, loads);
    if (!choice) return false;
    const size_t chosen = *choice;
    DI_CHECK(chosen < prefill_.size(), policy_.name() << " chose prefill instance " << chosen);
    PrefillInstance& instance = prefill_[chosen];
    // The queue estimate assumes the best reuse known at routing time, as the router would.
    const int64_t cached = std::max(routing.shared_cached_tokens, loads[chosen].cached_prefix_tokens);
    request.estimated_new_tokens = request.trace->input_tokens - cached;
    request.estimated_prefill_ms = cost_.prefill_ms(request.estimated_new_tokens, cached);
    instance.queue.push_back(id);
    instance.queued_tokens += request.estimated_new_tokens;
    instance.queued_ms += request.estimated_prefill_ms;
    if (!instance.busy) start_prefill_step(static_cast<int32_t>(chosen));
    return true;
  }

  // Offers the held requests again, in arrival order, after an instance's load dropped. Only the
  // seeds' policy holds, and it decides per length bucket on that bucket's instances, so once one
  // request of a bucket is held again the pass skips the rest of that bucket.
  void retry_held() {
    std::array<bool, LengthBuckets::kNumBuckets> bucket_full{};
    for (auto held = held_.begin(); held != held_.end();) {
      const int bucket = LengthBuckets::bucket_of(requests_[static_cast<size_t>(*held)].trace->input_tokens);
      if (bucket_full[static_cast<size_t>(bucket)]) {
        ++held;
      } else if (try_route_prefill(*held, /*is_retry=*/true)) {
        held = held_.erase(held);
      } else {
        bucket_full[static_cast<size_t>(bucket)] = true;
        ++held;
      }
    }
  }

  // Looks the prompt up in the instance's cache and the shared store; the store's extra blocks
  // are loaded (their time goes into the step).
  double begin_prefill(PrefillInstance& instance, SimRequest& request) {
    request.prefill_started = true;
    const std::span<const uint64_t> reusable = chain(request, reusable_blocks(request));
    const int64_t local_blocks = instance.cache.count_leading_blocks(reusable);
    const int64_t store_blocks = config_.shared_store ? store_.count_leading_blocks(reusable) : 0;
    instance.cache.use(reusable.first(static_cast<size_t>(local_blocks)));
    request.local_cached_tokens = local_blocks * kRoutingBlockTokens;
    request.cached_tokens = std::max(local_blocks, store_blocks) * kRoutingBlockTokens;
    const double load_ms = cost_.store_load_ms(request.cached_tokens - request.local_cached_tokens);
    request.prefill_work_ms += load_ms;
    return load_ms;
  }

  // Packs the queue's head into one step within the time budget (the seeds' rule 4: the chunk
  // follows from a budget and the cost model); at least one token, so every step progresses.
  void start_prefill_step(int32_t index) {
    PrefillInstance& instance = prefill_[static_cast<size_t>(index)];
    instance.step.clear();
    double step_ms = cost_.prefill_step_overhead_ms;
    const double budget_ms = config_.prefill_step_budget_ms - cost_.prefill_step_overhead_ms;
    double spent_ms = 0;
    int64_t step_tokens = 0;
    for (const int32_t id : instance.queue) {
      SimRequest& request = requests_[static_cast<size_t>(id)];
      if (!request.prefill_started) spent_ms += begin_prefill(instance, request);
      const int64_t prior = request.cached_tokens + request.computed_tokens;
      const int64_t remaining = request.trace->input_tokens - prior;
      int64_t tokens = std::min(remaining, cost_.max_tokens_within(budget_ms - spent_ms, prior));
      if (tokens == 0 && instance.step.empty()) tokens = 1;
      if (tokens == 0) break;
      const double compute_ms = cost_.prefill_tokens_ms(tokens, prior);
      request.prefill_work_ms += compute_ms;
      spent_ms += compute_ms;
      step_tokens += tokens;
      instance.step.emplace_back(id, tokens);
      if (tokens < remaining) break;
    }
    for (const auto& [id, tokens] : instance.step) {
      requests_[static_cast<size_t>(id)].prefill_work_ms +=
          cost_.prefill_step_overhead_ms * static_cast<double>(tokens) / static_cast<double>(step_tokens);
    }
    step_ms += spent_ms;
    instance.busy = true;
    instances_.prefill_busy_ms[static_cast<size_t>(index)] += step_ms;
    events_.push({now_ms_ + step_ms, next_sequence_++, EventKind::kPrefillStepDone, index});
  }

  void finish_prefill_step(int32_t index) {
    PrefillInstance& instance = prefill_[static_cast<size_t>(index)];
    for (const auto& [id, tokens] : instance.step) {
      SimRequest& request = requests_[static_cast<size_t>(id)];
      request.computed_tokens += tokens;
      instance.queued_tokens -= tokens;
      if (request.cached_tokens + request.computed_tokens < request.trace->input_tokens) continue;
      DI_CHECK(instance.queue.front() == id, "prefill steps take the queue in order");
      instance.queue.pop_front();
      instance.queued_ms -= request.estimated_prefill_ms;
      // The routing estimate assumed a reuse that may differ from what the step found.
      instance.queued_tokens -= request.estimated_new_tokens - request.computed_tokens;
      const std::span<const uint64_t> full_blocks = chain(request, full_blocks_of(request));
      instance.cache.use(full_blocks);
      if (config_.shared_store) store_.use(full_blocks);
      request.first_token_ms = now_ms_;
      request.generated_tokens = 1;
      if (request.trace->output_tokens <= 1) {
        finish_request(request);
      } else {
        route_decode(id);
      }
    }
    instance.busy = false;
    if (instance.queue.empty()) {
      instance.queued_tokens = 0;
      instance.queued_ms = 0;
    } else {
      start_prefill_step(index);
    }
    retry_held();
  }

  void route_decode(int32_t id) {
    SimRequest& request = requests_[static_cast<size_t>(id)];
    const RoutingRequest routing = routing_request(request, /*is_retry=*/false);
    std::vector<InstanceLoad> loads(decode_.size());
    for (size_t i = 0; i < decode_.size(); ++i) {
      const DecodeInstance& instance = decode_[i];
      loads[i].num_running_requests = static_cast<int32_t>(instance.running.size() + instance.waiting.size());
      loads[i].kv_tokens_used = instance.context_tokens;
      loads[i].kv_tokens_free = config_.decode_kv_capacity_tokens - instance.reserved_tokens - instance.waiting_tokens;
    }
    const size_t chosen = policy_.choose_decode(routing, loads);
    DI_CHECK(chosen < decode_.size(), policy_.name() << " chose decode instance " << chosen);
    DecodeInstance& instance = decode_[chosen];
    instance.waiting.push_back(id);
    instance.waiting_tokens += request.final_context_tokens();
    // A busy instance admits it when its running step ends (a step's batch is fixed at its start).
    if (!instance.busy) {
      admit_waiting(instance);
      start_decode_step(static_cast<int32_t>(chosen));
    }
  }

  // Moves waiting requests into the batch while a slot and their whole final KV fit (reserving the
  // final length up front means a running request is never preempted).
  void admit_waiting(DecodeInstance& instance) {
    while (!instance.waiting.empty()) {
      const SimRequest& next = requests_[static_cast<size_t>(instance.waiting.front())];
      const bool fits = instance.reserved_tokens + next.final_context_tokens() <= config_.decode_kv_capacity_tokens;
      if (!instance.running.empty() &&
          (!fits || static_cast<int32_t>(instance.running.size()) >= config_.decode_max_batch)) {
        break;
      }
      instance.running.push_back(instance.waiting.front());
      instance.waiting.pop_front();
      instance.waiting_tokens -= next.final_context_tokens();
      instance.reserved_tokens += next.final_context_tokens();
      instance.context_tokens += next.trace->input_tokens + next.generated_tokens;
    }
  }

  void start_decode_step(int32_t index) {
    DecodeInstance& instance = decode_[static_cast<size_t>(index)];
    if (instance.running.empty()) return;
    instance.busy = true;
    const double step_ms = cost_.decode_step_ms(static_cast<int64_t>(instance.running.size()), instance.context_tokens);
    events_.push({now_ms_ + step_ms, next_sequence_++, EventKind::kDecodeStepDone, index});
  }

  void finish_decode_step(int32_t index) {
    DecodeInstance& instance = decode_[static_cast<size_t>(index)];
    instances_.decode_generated_tokens[static_cast<size_t>(index)] += static_cast<int64_t>(instance.running.size());
    std::vector<int32_t> still_running;
    for (const int32_t id : instance.running) {
      SimRequest& request = requests_[static_cast<size_t>(id)];
      ++request.generated_tokens;
      ++instance.context_tokens;
      if (request.generated_tokens < request.trace->output_tokens) {
        still_running.push_back(id);
        continue;
      }
      instance.context_tokens -= request.trace->input_tokens + request.generated_tokens;
      instance.reserved_tokens -= request.final_context_tokens();
      finish_request(request);
    }
    instance.running = std::move(still_running);
    instance.busy = false;
    admit_waiting(instance);
    start_decode_step(index);
  }

  void finish_request(SimRequest& request) {
    request.finish_ms = now_ms_;
    if (progress_ != nullptr) progress_->advance(1);
  }

  const ClusterSimConfig& config_;
  const CostModel& cost_;
  BalancerPolicy& policy_;
  ProgressBar* progress_;
  PrefixLru store_;
  std::list<int32_t> held_;  // requests the policy held, in arrival order
  std::vector<PrefillInstance> prefill_;
  std::vector<DecodeInstance> decode_;
  std::vector<SimRequest> requests_;
  SimInstances instances_;
  std::priority_queue<Event, std::vector<Event>, std::greater<>> events_;
  double now_ms_ = 0;
  int64_t next_sequence_ = 0;
};

}  // namespace

ClusterSimResult simulate_cluster(const std::vector<TraceRequest>& trace, const ClusterSimConfig& config,
                                  BalancerPolicy& policy, ProgressBar* progress) {
  DI_CHECK(config.num_prefill_instances > 0 && config.num_decode_instances > 0 && config.rate_scale > 0);
  ClusterSimResult result = Simulation(trace, config, policy, progress).run();
  result.policy = policy.name();
  return result;
}

}  // namespace deepinfer
