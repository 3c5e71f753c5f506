// WorkerSelector: the registry's listing, the per-worker load snapshot and the policy's choice.
#include "server/worker_selector.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <tuple>

#include "cluster/length_buckets.h"

namespace deepinfer::server {

WorkerSelector::WorkerSelector(std::unique_ptr<BalancerPolicy> policy, WorkerSelectorOptions options)
    : policy_(std::move(policy)), policy_name_(policy_->name()), options_(std::move(options)) {}

double WorkerSelector::now_ms() const {
  static const auto start = std::chrono::steady_clock::now();
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
}

std::optional<std::string> WorkerSelector::shape_mismatch(const WorkerShape& shape, const WorkerRecord& record) const {
  const auto differs = [&](const char* flag, const std::optional<int32_t>& want, const std::optional<int32_t>& pinned,
                           int32_t has) -> std::optional<std::string> {
    if (!want || *want == has) return std::nullopt;
    const std::string whose = pinned ? "the router's " + std::string(flag) + " is "
                                     : "the workers already routed to have " + std::string(flag) + " ";
    return "has " + std::string(flag) + " " + std::to_string(has) + " but " + whose + std::to_string(*want) +
           ": not routed to (start every worker and the router with the same " + flag + ")";
  };
  if (auto why = differs("--block-size", shape.block_size, options_.pinned.block_size, record.block_size)) return why;
  return differs("--max-model-len", shape.max_model_len, options_.pinned.max_model_len, record.max_model_len);
}

std::vector<std::string> WorkerSelector::update(const std::vector<WorkerRecord>& records) {
  std::vector<std::string> log;
  std::lock_guard lock(mutex_);
  std::map<std::string, const WorkerRecord*> listed;
  for (const WorkerRecord& record : records) {
    if (record.role == "encoder") continue;  // image encoders: the EncoderSelector's
    if (record.model != options_.model) {
      if (!workers_.contains(record.id)) {
        log.push_back("worker " + record.id + " serves model '" + record.model + "', not '" + options_.model +
                      "': not routed to");
      }
      continue;
    }
    if (record.role != "both" && record.role != "prefill" && record.role != "decode") {
      if (!workers_.contains(record.id)) {
        log.push_back("worker " + record.id + " has an unknown role '" + record.role + "': not routed to");
      }
      continue;
    }
    listed[record.id] = &record;
  }
  // The shape: pinned by the router's flags, else kept from the workers routed to while any of them
  // is listed, else taken from the first new one. Those routed to before are checked first, so a
  // newcomer never displaces them.
  const bool keeps_shape =
      std::any_of(listed.begin(), listed.end(), [&](const auto& entry) { return workers_.contains(entry.first); });
  WorkerShape shape = options_.pinned;
  if (keeps_shape) {
    if (!shape.block_size) shape.block_size = shape_.block_size;
    if (!shape.max_model_len) shape.max_model_len = shape_.max_model_len;
  }
  std::map<std::string, std::string> refused;
  for (const bool routed_before : {true, false}) {
    for (const auto& [id, record] : listed) {
      if (workers_.contains(id) != routed_before) continue;
      if (std::optional<std::string> why = shape_mismatch(shape, *record)) {
        refused[id] = std::move(*why);
        continue;
      }
      if (!shape.block_size) shape.block_size = record->block_size;
      if (!shape.max_model_len) shape.max_model_len = record->max_model_len;
    }
  }
  for (const auto& [id, why] : refused) {
    listed.erase(id);
    auto before = refused_.find(id);
    if (before == refused_.end() || before->second != why) log.push_back("worker " + id + " " + why);
  }
  refused_ = std::move(refused);
  shape_ = shape;
  for (auto it = workers_.begin(); it != workers_.end();) {
    if (listed.contains(it->first)) {
      ++it;
      continue;
    }
    if (!refused_.contains(it->first)) {
      log.push_back("worker " + it->first + " left the registry (its key expired or it deregistered)");
    }
    it = workers_.erase(it);
  }
  for (const auto& [id, record] : listed) {
    auto [it, added] = workers_.try_emplace(id);
    Worker& worker = it->second;
    if (added) {
      worker.remembered = PrefixLru(options_.remembered_blocks_per_worker);
      log.push_back("worker " + id + " joined");
    }
    if (worker.failed && record->heartbeat > worker.failed_at_heartbeat) {
      worker.failed = false;
      log.push_back("worker " + id + " is alive again (a newer heartbeat)");
    }
    worker.record = *record;
  }
  retry_held_locked();
  return log;
}

std::vector<std::string> WorkerSelector::refused() const {
  std::lock_guard lock(mutex_);
  std::vector<std::string> lines;
  for (const auto& [id, why] : refused_) lines.push_back(id + " " + why);
  return lines;
}

int32_t WorkerSelector::block_size() const {
  std::lock_guard lock(mutex_);
  return block_size_locked();
}

int32_t WorkerSelector::block_size_locked() const { return shape_.block_size.value_or(EngineConfig{}.block_size); }

std::optional<int32_t> WorkerSelector::max_model_len() const {
  std::lock_guard lock(mutex_);
  return shape_.max_model_len;
}

void WorkerSelector::mark_failed(const std::string& id) {
  std::lock_guard lock(mutex_);
  auto it = workers_.find(id);
  if (it == workers_.end()) return;
  it->second.failed = true;
  it->second.failed_at_heartbeat = it->second.record.heartbeat;
  ++it->second.failures;
}

size_t WorkerSelector::num_live() const {
  std::lock_guard lock(mutex_);
  return static_cast<size_t>(
      std::count_if(workers_.begin(), workers_.end(), [](const auto& entry) { return !entry.second.failed; }));
}

size_t WorkerSelector::num_registered() const {
  std::lock_guard lock(mutex_);
  return workers_.size();
}

bool WorkerSelector::disaggregated_locked() const {
  bool prefill = false, decode = false;
  for (const auto& [id, worker] : workers_) {
    if (worker.failed) continue;
    prefill = prefill || worker.record.role == "prefill";
    decode = decode || worker.record.role == "decode";
  }
  return prefill && decode;
}

InstanceLoad WorkerSelector::load_of(const Worker& w, std::span<const uint64_t> reusable) const {
  InstanceLoad load;
  const WorkerLoadReport& report = w.record.load;
  // What this router sent and has not seen finish is exact and immediate; the worker's report is
  // up to a heartbeat old but also counts other routers' requests: the larger of the two.
  load.queued_prefill_tokens = std::max(w.outstanding_tokens, report.queued_tokens);
  load.queued_prefill_ms =
      std::max(w.outstanding_prefill_ms,
               report.queued_tokens > 0 ? options_.cost_model.prefill_ms(report.queued_tokens, 0) : 0.0);
  load.num_running_requests =
      static_cast<int32_t>(std::max<int64_t>(w.outstanding_requests, report.num_running + report.num_waiting));
  load.kv_tokens_used = report.kv_tokens_used;
  load.kv_tokens_free = report.kv_tokens_free;
  if (policy_->reads_cached_prefix()) {
    load.cached_prefix_tokens = w.remembered.count_leading_blocks(reusable) * block_size_locked();
  }
  return load;
}

std::vector<InstanceLoad> WorkerSelector::loads_in_policy_order(std::vector<Worker*>& candidates,
                                                                std::span<const uint64_t> reusable) const {
  // The policy groups consecutive instances: single engines first (by id), then each multi-engine
  // worker's ranks together in rank order, numbered as one DP group.
  std::stable_sort(candidates.begin(), candidates.end(), [](const Worker* a, const Worker* b) {
    const WorkerRecord& x = a->record;
    const WorkerRecord& y = b->record;
    return std::forward_as_tuple(!x.dp_group.empty(), x.dp_group, x.dp_rank) <
           std::forward_as_tuple(!y.dp_group.empty(), y.dp_group, y.dp_rank);
  });
  std::vector<InstanceLoad> loads;
  int64_t group = -1;
  for (size_t i = 0; i < candidates.size(); ++i) {
    loads.push_back(load_of(*candidates[i], reusable));
    const std::string& name = candidates[i]->record.dp_group;
    if (name.empty()) continue;
    if (group < 0 || name != candidates[i - 1]->record.dp_group) ++group;
    loads.back().dp_group = group;
  }
  return loads;
}

WorkerLease WorkerSelector::lease_on_locked(Worker& chosen, const RoutedRequest& request, int64_t cached,
                                            bool computes_prompt) {
  WorkerLease lease;
  lease.id = chosen.record.id;
  lease.host = chosen.record.host;
  lease.port = chosen.record.port;
  lease.role = chosen.record.role;
  lease.kv_port = chosen.record.kv_port;
  lease.max_body_bytes = chosen.record.max_body_bytes;
  lease.tokens = request.tokens;
  lease.prompt_tokens = request.prompt_tokens;
  // A decode worker continuing a prefill computes no prompt (store mode: only what the store lacks).
  lease.prefill_ms = computes_prompt ? options_.cost_model.prefill_ms(request.prompt_tokens - cached, cached) : 0.0;
  chosen.outstanding_tokens += lease.tokens;
  chosen.outstanding_prompt_tokens += lease.prompt_tokens;
  chosen.outstanding_prefill_ms += lease.prefill_ms;
  ++chosen.outstanding_requests;
  ++chosen.routed;
  return lease;
}

std::optional<WorkerLease> WorkerSelector::choose_locked(const RoutedRequest& request,
                                                         const std::vector<std::string>& exclude, bool is_retry,
                                                         bool* no_worker) {
  // With live prefill and decode workers a request is disaggregated: the policy's prefill choice
  // picks among the prefill workers here, its decode choice a decode worker in acquire_decode
  // (n > 1 too: the prefill worker runs sample 0, the decode worker forks the others).
  const bool disaggregated = disaggregated_locked();
  const auto eligible = [&](const std::string& role) { return role == (disaggregated ? "prefill" : "both"); };
  std::vector<Worker*> candidates;
  for (auto& [id, worker] : workers_) {
    if (worker.failed || !eligible(worker.record.role) ||
        std::find(exclude.begin(), exclude.end(), id) != exclude.end()) {
      continue;
    }
    candidates.push_back(&worker);
  }
  *no_worker = candidates.empty();
  if (candidates.empty()) return std::nullopt;
  const std::vector<uint64_t> keys = block_keys(request.prompt_blocks);
  // The last token is always computed, so a prompt's cached run stops one token short of it.
  const int64_t reusable_blocks =
      std::min<int64_t>(static_cast<int64_t>(keys.size()), (request.prompt_tokens - 1) / block_size_locked());
  const std::span<const uint64_t> reusable(keys.data(), static_cast<size_t>(std::max<int64_t>(reusable_blocks, 0)));
  const std::vector<InstanceLoad> loads = loads_in_policy_order(candidates, reusable);
  RoutingRequest routing;
  routing.now_ms = now_ms();
  routing.input_tokens = request.prompt_tokens;
  routing.output_tokens_estimate = request.tokens - request.prompt_tokens;
  routing.block_hashes = keys;
  routing.is_retry = is_retry;
  const std::optional<size_t> choice = policy_->choose_prefill(routing, loads);
  if (!choice) return std::nullopt;
  const size_t index = std::min(*choice, candidates.size() - 1);
  Worker& chosen = *candidates[index];
  const int64_t cached = policy_->reads_cached_prefix() ? loads[index].cached_prefix_tokens : 0;
  WorkerLease lease = lease_on_locked(chosen, request, cached, /*computes_prompt=*/true);
  ++routed_total_;
  // Full blocks the worker's cache keeps once the prompt ran.
  const size_t full_blocks = std::min(keys.size(), static_cast<size_t>(request.prompt_tokens / block_size_locked()));
  chosen.remembered.use(std::span<const uint64_t>(keys.data(), full_blocks));
  return lease;
}

std::optional<WorkerLease> WorkerSelector::acquire_decode(const RoutedRequest& request,
                                                          const std::vector<std::string>& exclude,
                                                          bool recomputes_prompt) {
  std::lock_guard lock(mutex_);
  std::vector<Worker*> candidates;
  const auto gather = [&](const std::string& role) {
    for (auto& [id, worker] : workers_) {
      if (worker.failed || worker.record.role != role ||
          std::find(exclude.begin(), exclude.end(), id) != exclude.end()) {
        continue;
      }
      candidates.push_back(&worker);
    }
  };
  gather("decode");
  if (candidates.empty() && recomputes_prompt) gather("both");
  if (candidates.empty()) return std::nullopt;
  const std::vector<InstanceLoad> loads = loads_in_policy_order(candidates, {});
  RoutingRequest routing;
  routing.now_ms = now_ms();
  routing.input_tokens = request.prompt_tokens;
  routing.output_tokens_estimate = request.tokens - request.prompt_tokens;
  const size_t choice = std::min(policy_->choose_decode(routing, loads), candidates.size() - 1);
  return lease_on_locked(*candidates[choice], request, 0, recomputes_prompt);
}

WorkerSelector::Selection WorkerSelector::acquire(const RoutedRequest& request,
                                                  const std::vector<std::string>& exclude) {
  std::lock_guard lock(mutex_);
  Selection selection;
  bool no_worker = false;
  // Older held requests were offered again whenever load dropped (release, update), so one the
  // policy places now does not overtake them.
  std::optional<WorkerLease> lease = choose_locked(request, exclude, /*is_retry=*/false, &no_worker);
  if (lease) {
    selection.outcome = Outcome::kChosen;
    selection.lease = std::move(*lease);
    return selection;
  }
  if (no_worker) return selection;
  selection.outcome = Outcome::kHeld;
  selection.ticket = next_ticket_++;
  held_.push_back(Held{selection.ticket, request, exclude});
  return selection;
}

WorkerSelector::Selection WorkerSelector::poll_held(int64_t ticket) {
  std::lock_guard lock(mutex_);
  Selection selection;
  if (auto placed = placed_.find(ticket); placed != placed_.end()) {
    selection = std::move(placed->second);
    placed_.erase(placed);
    return selection;
  }
  auto held = std::find_if(held_.begin(), held_.end(), [&](const Held& h) { return h.ticket == ticket; });
  if (held == held_.end()) return selection;  // kNoWorker: retry_held_locked found none to wait for
  selection.outcome = Outcome::kHeld;
  selection.ticket = ticket;
  return selection;
}

void WorkerSelector::cancel_held(int64_t ticket) {
  std::unique_lock lock(mutex_);
  held_.remove_if([&](const Held& h) { return h.ticket == ticket; });
  auto placed = placed_.find(ticket);
  if (placed == placed_.end()) return;
  const WorkerLease lease = placed->second.lease;
  placed_.erase(placed);
  lock.unlock();
  release(lease);  // placed by a retry, then abandoned before its coroutine saw it
}

void WorkerSelector::retry_held_locked() {
  // As the simulator does: in arrival order, and once a request of a length bucket stays held the
  // later ones of that bucket wait behind it (the seeds' policy decides per bucket).
  std::array<bool, LengthBuckets::kNumBuckets> bucket_full{};
  for (auto held = held_.begin(); held != held_.end();) {
    const auto bucket = static_cast<size_t>(LengthBuckets::bucket_of(held->request.prompt_tokens));
    if (bucket_full[bucket]) {
      ++held;
      continue;
    }
    bool no_worker = false;
    std::optional<WorkerLease> lease = choose_locked(held->request, held->exclude, /*is_retry=*/true, &no_worker);
    if (lease || no_worker) {
      Selection selection;
      if (lease) {
        selection.outcome = Outcome::kChosen;
        selection.lease = std::move(*lease);
        placed_[held->ticket] = std::move(selection);
      }  // no worker left: the ticket disappears and poll_held answers kNoWorker
      held = held_.erase(held);
    } else {
      bucket_full[bucket] = true;
      ++held;
    }
  }
}

void WorkerSelector::release(const WorkerLease& lease) {
  std::lock_guard lock(mutex_);
  auto it = workers_.find(lease.id);
  if (it != workers_.end()) {
    Worker& worker = it->second;
    worker.outstanding_tokens -= lease.tokens;
    worker.outstanding_prompt_tokens -= lease.prompt_tokens;
    worker.outstanding_prefill_ms = std::max(0.0, worker.outstanding_prefill_ms - lease.prefill_ms);
    --worker.outstanding_requests;
  }
  retry_held_locked();
}

void WorkerSelector::render_metrics(std::string& out) const {
  std::lock_guard lock(mutex_);
  size_t live = 0;
  for (const auto& [id, worker] : workers_) live += worker.failed ? 0 : 1;
  out +=
      "# HELP deepinfer_router_workers Workers in the registry serving this model, and of those the live ones "
      "(not marked failed since their last heartbeat), and those refused for another block size or context "
      "length.\n# TYPE deepinfer_router_workers gauge\n"
      "deepinfer_router_workers{state=\"registered\"} " +
      std::to_string(workers_.size()) + "\n" + "deepinfer_router_workers{state=\"live\"} " + std::to_string(live) +
      "\n" + "deepinfer_router_workers{state=\"refused\"} " + std::to_string(refused_.size()) + "\n";
  out +=
      "# HELP deepinfer_router_held_requests Requests the policy holds until a worker has room (the seeds' quota "
      "pull).\n# TYPE deepinfer_router_held_requests gauge\ndeepinfer_router_held_requests " +
      std::to_string(held_.size()) + "\n";
  out +=
      "# HELP deepinfer_router_routed_requests Requests the router placed on a worker since it started.\n"
      "# TYPE deepinfer_router_routed_requests counter\ndeepinfer_router_routed_requests " +
      std::to_string(routed_total_) + "\n";
  const auto per_worker = [&](const char* name, const char* type, const char* help, auto value) {
    out += std::string("# HELP ") + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
    for (const auto& [id, worker] : workers_)
      out += std::string(name) + "{worker=\"" + id + "\"} " + value(worker) + "\n";
  };
  const auto num = [](auto v) { return std::to_string(v); };
  per_worker("deepinfer_worker_outstanding_tokens", "gauge",
             "Tokens of requests the router sent the worker and has not seen finish (prompt + n x max_tokens).",
             [&](const Worker& w) { return num(w.outstanding_tokens); });
  per_worker("deepinfer_worker_outstanding_requests", "gauge", "Requests in flight on the worker from this router.",
             [&](const Worker& w) { return num(w.outstanding_requests); });
  per_worker("deepinfer_worker_routed_requests_total", "counter", "Routing decisions per worker.",
             [&](const Worker& w) { return num(w.routed); });
  per_worker("deepinfer_worker_failures_total", "counter",
             "Times the router could not reach the worker or lost it mid-request.",
             [&](const Worker& w) { return num(w.failures); });
  per_worker("deepinfer_worker_reported_queued_tokens", "gauge",
             "The worker's queue at its last heartbeat: n x (prompt + max_tokens) of requests not started.",
             [&](const Worker& w) { return num(w.record.load.queued_tokens); });
  per_worker("deepinfer_worker_reported_running_requests", "gauge", "The worker's batch at its last heartbeat.",
             [&](const Worker& w) { return num(w.record.load.num_running); });
  per_worker("deepinfer_worker_reported_waiting_requests", "gauge", "The worker's engine queue at its last heartbeat.",
             [&](const Worker& w) { return num(w.record.load.num_waiting); });
  per_worker("deepinfer_worker_reported_kv_usage_ratio", "gauge", "The worker's KV pool in use at its last heartbeat.",
             [&](const Worker& w) { return num(w.record.load.kv_usage); });
  per_worker("deepinfer_worker_reported_cached_tokens_total", "counter",
             "Prompt tokens the worker served from its prefix cache, at its last heartbeat.",
             [&](const Worker& w) { return num(w.record.load.cached_tokens); });
  int64_t total = 0, busiest = 0;
  for (const auto& [id, worker] : workers_) {
    total += worker.outstanding_tokens;
    busiest = std::max(busiest, worker.outstanding_tokens);
  }
  const double mean = workers_.empty() ? 0.0 : static_cast<double>(total) / static_cast<double>(workers_.size());
  out +=
      "# HELP deepinfer_router_balance_ratio The busiest worker's outstanding tokens over the mean (1: even or "
      "idle).\n# TYPE deepinfer_router_balance_ratio gauge\ndeepinfer_router_balance_ratio " +
      std::to_string(total > 0 ? static_cast<double>(busiest) / mean : 1.0) + "\n";
}

}  // namespace deepinfer::server
