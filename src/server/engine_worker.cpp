// The engine thread: inbox -> EngineCore::add_request / abort_request, step(), outputs -> channels.
#include "server/engine_worker.h"

#include <csignal>
#include <sstream>

#include "core/device_error.h"
#include "core/logging.h"

namespace deepinfer::server {
namespace {

double seconds_between(std::chrono::steady_clock::time_point from, std::chrono::steady_clock::time_point to) {
  return std::chrono::duration<double>(to - from).count();
}

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// What a request weighs against max_queued_tokens: each of its n samples may run the prompt
// and max_tokens (a preempted sample recomputes them), so n x (prompt + max_tokens), saturated.
int64_t queued_token_cost(const Submission& s) {
  const int64_t per_sample = static_cast<int64_t>(s.prompt_token_ids.size()) + std::max(s.params.max_tokens, 0);
  const int64_t n = std::max(s.params.n, 1);
  return per_sample > 0 && n > INT64_MAX / per_sample ? INT64_MAX : n * per_sample;
}

void send_error(OutputChannel& channel, int64_t request_id, int status, std::string message) {
  EngineEvent event;
  event.output.request_id = request_id;
  event.output.finished = true;
  event.error = Error{std::move(message)};
  event.error_status = status;
  channel.try_send(boost::system::error_code{}, std::move(event));
}

}  // namespace

EngineWorker::EngineWorker(EngineCore& engine, Metrics& metrics, const WorkerLimits& limits)
    : engine_(engine), metrics_(metrics), limits_(limits), thread_([this] { loop(); }) {}

EngineWorker::~EngineWorker() {
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
  }
  wake_.notify_one();
  if (thread_.joinable()) thread_.join();
}

Admission EngineWorker::submit(Submission submission) {
  const int64_t cost = queued_token_cost(submission);
  int64_t request_id = 0;
  {
    std::lock_guard lock(mutex_);
    if (unavailable_) return Refusal{false, *unavailable_};
    // An empty queue takes anything, so a large request is never refused for ever.
    if (limits_.max_queued_requests <= 0 || (queued_requests_ > 0 && queued_requests_ >= limits_.max_queued_requests)) {
      return Refusal{true, "the server is overloaded: too many requests are queued; retry later"};
    }
    if (queued_requests_ > 0 && cost > limits_.max_queued_tokens - queued_tokens_) {
      return Refusal{true, "the server is overloaded: this request's " + std::to_string(cost) +
                               " tokens (n x (prompt + max_tokens)) do not fit the queue's token budget "
                               "(--max-queued-tokens) beside the requests waiting; retry later"};
    }
    ++queued_requests_;
    queued_tokens_ += cost;
    request_id = next_request_id_++;
    open_.emplace(request_id, submission.channel);
    inbox_.push_back(Pending{request_id, cost, std::move(submission), std::chrono::steady_clock::now()});
  }
  wake_.notify_one();
  return request_id;
}

int64_t EngineWorker::queued_tokens() const {
  std::lock_guard lock(mutex_);
  return queued_tokens_;
}

void EngineWorker::abort(int64_t request_id) {
  {
    std::lock_guard lock(mutex_);
    aborts_.push_back(request_id);
  }
  wake_.notify_one();
}

std::optional<std::string> EngineWorker::unavailable() const {
  std::lock_guard lock(mutex_);
  return unavailable_;
}

void EngineWorker::shutdown(const std::string& reason) {
  std::map<int64_t, std::shared_ptr<OutputChannel>> open;
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
    if (!unavailable_) unavailable_ = reason;
    open.swap(open_);
  }
  wake_.notify_one();
  for (const auto& [request_id, channel] : open) send_error(*channel, request_id, 503, reason);
}

bool EngineWorker::stop(std::chrono::steady_clock::time_point deadline) {
  std::unique_lock lock(mutex_);
  stop_ = true;
  if (!unavailable_) unavailable_ = "the server is shutting down";
  wake_.notify_one();
  if (!done_.wait_until(lock, deadline, [&] { return thread_done_; })) return false;
  lock.unlock();
  if (thread_.joinable()) thread_.join();
  return true;
}

std::string EngineWorker::activity() const {
  const int64_t began_ns = step_began_ns_.load();
  if (began_ns == 0) return "between steps";
  std::ostringstream out;
  out << "inside a step for " << static_cast<double>(now_ns() - began_ns) * 1e-9 << " s";
  return out.str();
}

void EngineWorker::leave_queue(Entry& entry) {
  if (entry.started) return;
  entry.started = true;
  std::lock_guard lock(mutex_);
  --queued_requests_;
  queued_tokens_ -= entry.queued_tokens;
}

void EngineWorker::forget(int64_t request_id) {
  entries_.erase(request_id);
  std::lock_guard lock(mutex_);
  open_.erase(request_id);
}

void EngineWorker::admit(Pending pending) {
  Submission& s = pending.submission;
  Entry entry{s.channel, pending.submitted, pending.submitted, pending.queued_tokens};
  Result<void> added;
  int status = 400;
  if (disabled_) {
    added = Error{unavailable().value_or("the server can run no requests")};
    status = 503;
  } else {
    try {
      if (s.prefilled) {
        s.prefilled->request_id = pending.request_id;
        added = engine_.add_prefilled_request(std::move(*s.prefilled), s.priority, std::move(s.cache_salt),
                                              s.kv_cache_class, std::move(s.images));
      } else if (engine_.config().mode == EngineMode::kPrompt && !s.kv_handoff) {
        added = Error{
            "this worker only prefills for a cluster router (serve --role prefill); send requests to the "
            "router"};
      } else {
        // The store mode's KV leaves as the store's pages, a push's as the prefill runs: none is
        // copied out at its end.
        PrefillHandover handover = PrefillHandover::kCopyKv;
        if (s.kv_handoff && s.kv_handoff->mode == KvTransferMode::kStore) handover = PrefillHandover::kThroughStore;
        if (s.kv_sink) handover = PrefillHandover::kStream;
        added = engine_.add_request(pending.request_id, std::move(s.prompt_token_ids), s.params, s.priority,
                                    std::move(s.cache_salt), s.kv_cache_class, handover, std::move(s.kv_sink),
                                    std::move(s.images));
      }
    } catch (const std::exception& e) {
      // A failed check while validating one request refuses that request, not the server.
      added = Error{e.what()};
    }
  }
  if (!added.ok()) {
    leave_queue(entry);
    send_error(*entry.channel, pending.request_id, status, added.error().message);
    std::lock_guard lock(mutex_);
    open_.erase(pending.request_id);
    return;
  }
  entries_.emplace(pending.request_id, std::move(entry));
}

void EngineWorker::fail(int64_t request_id, int status, const std::string& message) {
  const auto it = entries_.find(request_id);
  if (it == entries_.end()) return;
  leave_queue(it->second);
  if (!it->second.dropped) send_error(*it->second.channel, request_id, status, message);
  forget(request_id);
}

void EngineWorker::fail_all(int status, const std::string& message) {
  std::vector<int64_t> request_ids;
  for (const auto& [request_id, entry] : entries_) request_ids.push_back(request_id);
  for (int64_t request_id : request_ids) fail(request_id, status, message);
}

void EngineWorker::disable(const std::string& why) {
  DI_LOG(kError, why << "; the server can run nothing more: /health answers 503 and every request is refused "
                        "until it is restarted");
  disabled_ = true;
  {
    std::lock_guard lock(mutex_);
    unavailable_ = why;
  }
  fail_all(503, why);
  bool stopping = false;
  {
    std::lock_guard lock(mutex_);
    stopping = stop_;
  }
  if (limits_.group_rounds && !stopping) {
    DI_LOG(kError, "this rank leaves its data-parallel group: shutting down");
    std::raise(SIGTERM);
  }
}

bool EngineWorker::join_group_round() {
  try {
    return engine_.run_idle_step();
  } catch (const std::exception& e) {
    disable(std::string("the data-parallel group failed: ") + e.what());
    return false;
  }
}

void EngineWorker::deliver(const RequestOutput& output, std::shared_ptr<const PrefilledRequest> prefilled) {
  auto it = entries_.find(output.request_id);
  if (it == entries_.end()) return;
  Entry& entry = it->second;
  const auto now = std::chrono::steady_clock::now();
  int64_t num_new_tokens = 0;
  for (const SampleOutput& sample : output.samples) num_new_tokens += static_cast<int64_t>(sample.new_token_ids.size());
  if (!entry.started && (num_new_tokens > 0 || output.finished)) {
    leave_queue(entry);
    metrics_.add_prompt_tokens(output.num_prompt_tokens);
    if (num_new_tokens > 0) metrics_.observe_ttft(seconds_between(entry.submitted, now));
  } else if (num_new_tokens > 0) {
    metrics_.observe_inter_token(seconds_between(entry.last_token, now));
  }
  if (num_new_tokens > 0) {
    entry.last_token = now;
    metrics_.add_generation_tokens(num_new_tokens);
  }
  if (output.failure) {
    DI_LOG(kError, "request " << output.request_id << " failed in the engine: " << output.failure->message);
    fail(output.request_id, 500, "the engine failed while running this request: " + output.failure->message);
    return;
  }
  EngineEvent event{output, std::nullopt};
  event.prefilled = std::move(prefilled);
  if (!entry.dropped && !entry.channel->try_send(boost::system::error_code{}, std::move(event))) {
    // The client stopped reading and its buffer is full: free the engine for the others.
    entry.dropped = true;
    engine_.abort_request(output.request_id);
    entry.channel->close();
  }
  if (output.finished) {
    metrics_.observe_e2e(seconds_between(entry.submitted, now));
    forget(output.request_id);
  }
}

void EngineWorker::run_engine(const std::vector<int64_t>& aborts) {
  try {
    for (int64_t request_id : aborts) {
      if (entries_.count(request_id) > 0) engine_.abort_request(request_id);
    }
    if (!engine_.has_unfinished_requests()) return;
    step_began_ns_ = now_ns();
    const std::vector<RequestOutput> outputs = engine_.step();
    step_began_ns_ = 0;
    std::map<int64_t, std::shared_ptr<const PrefilledRequest>> prefilled;
    for (PrefilledRequest& p : engine_.take_prefilled()) {
      const int64_t request_id = p.request_id;
      prefilled.emplace(request_id, std::make_shared<const PrefilledRequest>(std::move(p)));
    }
    for (const RequestOutput& output : outputs) {
      auto handed = prefilled.find(output.request_id);
      deliver(output, handed == prefilled.end() ? nullptr : handed->second);
    }
  } catch (const std::exception& e) {
    step_began_ns_ = 0;
    if (loses_device(e)) {
      disable(std::string("the device failed: ") + e.what());
      return;
    }
    // Not pinned on any request (a scheduling bug, a failed page import): all of them fail, and
    // aborting them in the engine frees their KV.
    DI_LOG(kError, "an engine step failed (" << e.what() << "); failing the " << entries_.size()
                                             << " requests in flight");
    std::vector<int64_t> request_ids;
    for (const auto& [request_id, entry] : entries_) request_ids.push_back(request_id);
    fail_all(500, std::string("internal error: ") + e.what());
    try {
      for (int64_t request_id : request_ids) engine_.abort_request(request_id);
    } catch (const std::exception& again) {
      disable(std::string("the engine could not free the failed requests: ") + again.what());
    }
  }
}

void EngineWorker::publish_gauges() {
  const EngineStats stats = engine_.stats();
  EngineGauges gauges;
  gauges.num_waiting = static_cast<int64_t>(stats.num_waiting);
  gauges.num_running = static_cast<int64_t>(stats.num_running);
  gauges.kv_usage = stats.kv_usage;
  gauges.prefix_queried_tokens = stats.prefix_cache.queried_tokens;
  gauges.prefix_hit_tokens = stats.prefix_cache.hit_tokens;
  gauges.num_preemptions = stats.num_preemptions;
  gauges.num_overlapped_steps = stats.num_overlapped_steps;
  gauges.num_encoded_images = stats.num_encoded_images;
  gauges.kv_store = stats.kv_store;
  gauges.speculative = stats.speculative;
  metrics_.set_engine(gauges);
}

void EngineWorker::loop() {
  // Between rounds of an idle group the wait grows to 20 ms: what a request arriving at an idle
  // group may wait for the other ranks to join its first forward.
  std::chrono::milliseconds idle_wait{0};
  for (;;) {
    std::vector<Pending> adds;
    std::vector<int64_t> aborts;
    {
      std::unique_lock lock(mutex_);
      const auto has_work = [&] {
        return stop_ || !inbox_.empty() || !aborts_.empty() || (!disabled_ && engine_.has_unfinished_requests());
      };
      if (limits_.group_rounds && !disabled_) {
        wake_.wait_for(lock, idle_wait, has_work);
      } else {
        wake_.wait(lock, has_work);
      }
      if (stop_) break;
      adds.swap(inbox_);
      aborts.swap(aborts_);
    }
    for (Pending& pending : adds) admit(std::move(pending));
    const int64_t rounds_before = engine_.num_group_rounds();
    if (!disabled_) run_engine(aborts);
    if (limits_.group_rounds && !disabled_) {
      const bool ran_forward = engine_.num_group_rounds() != rounds_before;
      const bool group_busy = ran_forward || join_group_round();
      idle_wait = group_busy ? std::chrono::milliseconds(0)
                             : std::min(std::max(2 * idle_wait, std::chrono::milliseconds(1)),
                                        std::chrono::milliseconds(20));
    }
    if (!disabled_ && !engine_.has_unfinished_requests()) {
      // Every request ends with a finished output, so an idle engine leaves no entry behind.
      if (!entries_.empty()) {
        DI_LOG(kError, entries_.size() << " requests ended without a final output (a deepinfer bug); failing them");
        fail_all(500, "internal error: the engine lost this request");
      }
      // A broken invariant ends the process here on purpose: tests want to hear of it.
      if (limits_.check_invariants) engine_.check_invariants();
    }
    publish_gauges();
  }
  // Shutting down: free what still runs, which queues its computed pages for the KV store.
  if (!disabled_) {
    try {
      for (const auto& [request_id, entry] : entries_) engine_.abort_request(request_id);
    } catch (const std::exception& e) {
      DI_LOG(kWarn, "shutdown: aborting the running requests failed: " << e.what());
    }
  }
  {
    std::lock_guard lock(mutex_);
    thread_done_ = true;
  }
  done_.notify_all();
}

}  // namespace deepinfer::server
