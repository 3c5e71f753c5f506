// The engine thread of the server: owns every call into EngineCore (which is not thread-safe),
// takes requests and aborts from a thread-safe inbox, steps while work exists, and hands each
// RequestOutput to the request's bounded channel. It never waits on a client: a request whose
// channel is full (the client stopped reading) is aborted.
#pragma once

#include <boost/asio/experimental/concurrent_channel.hpp>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "core/result.h"
#include "engine/engine_core.h"
#include "server/metrics.h"

namespace deepinfer::server {

// One message to a request's connection: an engine output, or the engine's refusal of the
// request (add_request failed; nothing of it runs).
struct EngineEvent {
  RequestOutput output;
  std::optional<Error> error;
};

using OutputChannel = boost::asio::experimental::concurrent_channel<void(boost::system::error_code, EngineEvent)>;

struct WorkerLimits {
  // Requests admitted but not yet started (no token out) and their prompt tokens; a request that
  // would pass either bound is refused (overload). A request arriving at an empty queue is
  // always admitted, so a long prompt is never refused for ever.
  int32_t max_queued_requests = 256;
  int64_t max_queued_tokens = 1 << 20;
  // Run EngineCore::check_invariants each time the engine goes idle (tests).
  bool check_invariants = false;
};

struct Submission {
  std::vector<int32_t> prompt_token_ids;
  SamplingParams params;
  int32_t priority = 0;
  std::string cache_salt;
  std::shared_ptr<OutputChannel> channel;  // receives every output; the worker keeps it alive
  TrafficClass kv_cache_class = TrafficClass::kDefault;
};

class EngineWorker {
 public:
  // Starts the engine thread. engine and metrics must outlive the worker.
  EngineWorker(EngineCore& engine, Metrics& metrics, const WorkerLimits& limits);
  // Stops the thread; requests still running are dropped with it.
  ~EngineWorker();
  EngineWorker(const EngineWorker&) = delete;
  EngineWorker& operator=(const EngineWorker&) = delete;

  // Thread-safe. The request id, or nullopt when the queue is full (answer 429 / 529).
  std::optional<int64_t> submit(Submission submission);
  // Thread-safe. Cancels a request at any point and frees its KV blocks in the engine's next
  // iteration; its channel then gets a finished output with FinishReason::kAbort.
  void abort(int64_t request_id);

 private:
  struct Entry {
    std::shared_ptr<OutputChannel> channel;
    std::chrono::steady_clock::time_point submitted;
    std::chrono::steady_clock::time_point last_token;
    int64_t num_prompt_tokens = 0;
    bool started = false;  // left the queue
    bool dropped = false;  // channel overflowed; the request was aborted
  };
  struct Pending {
    int64_t request_id = 0;
    Submission submission;
    std::chrono::steady_clock::time_point submitted;
  };

  void loop();
  void admit(Pending pending);
  void deliver(const RequestOutput& output);
  void leave_queue(Entry& entry);
  void publish_gauges();

  EngineCore& engine_;
  Metrics& metrics_;
  WorkerLimits limits_;

  std::mutex mutex_;  // guards the fields down to queued_tokens_
  std::condition_variable wake_;
  bool stop_ = false;
  std::vector<Pending> inbox_;
  std::vector<int64_t> aborts_;
  int64_t next_request_id_ = 1;
  int64_t queued_requests_ = 0;
  int64_t queued_tokens_ = 0;

  std::map<int64_t, Entry> entries_;  // engine thread only
  std::thread thread_;
};

}  // namespace deepinfer::server
