// The engine thread: inbox -> EngineCore::add_request / abort_request, step(), outputs -> channels.
#include "server/engine_worker.h"

#include "core/check.h"

namespace deepinfer::server {
namespace {

double seconds_between(std::chrono::steady_clock::time_point from, std::chrono::steady_clock::time_point to) {
  return std::chrono::duration<double>(to - from).count();
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
  thread_.join();
}

std::optional<int64_t> EngineWorker::submit(Submission submission) {
  const auto num_tokens = static_cast<int64_t>(submission.prompt_token_ids.size());
  int64_t request_id = 0;
  {
    std::lock_guard lock(mutex_);
    if (queued_requests_ > 0 &&
        (queued_requests_ >= limits_.max_queued_requests || queued_tokens_ + num_tokens > limits_.max_queued_tokens)) {
      return std::nullopt;
    }
    if (limits_.max_queued_requests <= 0) return std::nullopt;
    ++queued_requests_;
    queued_tokens_ += num_tokens;
    request_id = next_request_id_++;
    inbox_.push_back(Pending{request_id, std::move(submission), std::chrono::steady_clock::now()});
  }
  wake_.notify_one();
  return request_id;
}

void EngineWorker::abort(int64_t request_id) {
  {
    std::lock_guard lock(mutex_);
    aborts_.push_back(request_id);
  }
  wake_.notify_one();
}

void EngineWorker::leave_queue(Entry& entry) {
  if (entry.started) return;
  entry.started = true;
  std::lock_guard lock(mutex_);
  --queued_requests_;
  queued_tokens_ -= entry.num_prompt_tokens;
}

void EngineWorker::admit(Pending pending) {
  Submission& s = pending.submission;
  Entry entry{s.channel, pending.submitted, pending.submitted, static_cast<int64_t>(s.prompt_token_ids.size())};
  Result<void> added;
  try {
    added = engine_.add_request(pending.request_id, std::move(s.prompt_token_ids), s.params, s.priority,
                                std::move(s.cache_salt), s.kv_cache_class);
  } catch (const std::exception& e) {
    // A failed check while validating one request refuses that request, not the server.
    added = Error{e.what()};
  }
  if (!added.ok()) {
    leave_queue(entry);
    EngineEvent event;
    event.output.request_id = pending.request_id;
    event.output.finished = true;
    event.error = added.error();
    entry.channel->try_send(boost::system::error_code{}, std::move(event));
    return;
  }
  entries_.emplace(pending.request_id, std::move(entry));
}

void EngineWorker::deliver(const RequestOutput& output) {
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
  if (!entry.dropped && !entry.channel->try_send(boost::system::error_code{}, EngineEvent{output, std::nullopt})) {
    // The client stopped reading and its buffer is full: free the engine for the others.
    entry.dropped = true;
    engine_.abort_request(output.request_id);
    entry.channel->close();
  }
  if (output.finished) {
    metrics_.observe_e2e(seconds_between(entry.submitted, now));
    entries_.erase(it);
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
  gauges.kv_store = stats.kv_store;
  metrics_.set_engine(gauges);
}

void EngineWorker::loop() {
  for (;;) {
    std::vector<Pending> adds;
    std::vector<int64_t> aborts;
    {
      std::unique_lock lock(mutex_);
      wake_.wait(lock, [&] { return stop_ || !inbox_.empty() || !aborts_.empty() || !entries_.empty(); });
      if (stop_) return;
      adds.swap(inbox_);
      aborts.swap(aborts_);
    }
    for (Pending& pending : adds) admit(std::move(pending));
    for (int64_t request_id : aborts) {
      if (entries_.count(request_id) > 0) engine_.abort_request(request_id);
    }
    if (engine_.has_unfinished_requests()) {
      for (const RequestOutput& output : engine_.step()) deliver(output);
    }
    if (!engine_.has_unfinished_requests()) {
      // Every request ends with a finished output, so an idle engine leaves no entry behind.
      DI_CHECK(entries_.empty());
      if (limits_.check_invariants) engine_.check_invariants();
    }
    publish_gauges();
  }
}

}  // namespace deepinfer::server
