// The engine thread of the server: owns every call into EngineCore (which is not thread-safe),
// takes requests and aborts from a thread-safe inbox, steps while work exists, and hands each
// RequestOutput to the request's bounded channel. It never waits on a client: a request whose
// channel is full (the client stopped reading) is aborted. A failed step ends the requests it ran
// with a 500 event and the others go on; a lost device ends every request with 503 and refuses
// the later ones (unavailable() says why). shutdown() ends the open requests from the calling
// thread, so their clients hear of it even while a step is stuck.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <variant>
#include <vector>

#include "core/result.h"
#include "engine/engine_core.h"
#include "server/generation_backend.h"
#include "server/metrics.h"

namespace deepinfer::server {

struct WorkerLimits {
  // Requests admitted but not yet started (no token out) and the tokens they may run, each
  // n x (prompt + max_tokens); a request that would pass either bound is refused (overload). A
  // request arriving at an empty queue is always admitted, so a long prompt is never refused for
  // ever.
  int32_t max_queued_requests = 256;
  int64_t max_queued_tokens = 1 << 20;
  // Run EngineCore::check_invariants each time the engine goes idle (tests).
  bool check_invariants = false;
  // The model is one rank of an expert-parallel group: whenever this rank runs no forward of its
  // own, the worker joins the other ranks' round (EngineCore::run_idle_step), since their MoE
  // layers need this rank's experts; a lost group ends the process (SIGTERM: the server's
  // shutdown answers the open requests), so the other ranks hear of it at once.
  bool group_rounds = false;
};

class EngineWorker : public GenerationBackend {
 public:
  // Starts the engine thread. engine and metrics must outlive the worker.
  EngineWorker(EngineCore& engine, Metrics& metrics, const WorkerLimits& limits);
  // stop() without a deadline; requests still running are dropped with it.
  ~EngineWorker();
  EngineWorker(const EngineWorker&) = delete;
  EngineWorker& operator=(const EngineWorker&) = delete;

  // Thread-safe.
  Admission submit(Submission submission) override;
  // Thread-safe. Cancels a request at any point and frees its KV blocks in the engine's next
  // iteration; its channel then gets a finished output with FinishReason::kAbort.
  void abort(int64_t request_id) override;
  // Thread-safe: why the worker refuses every request (the device was lost, it is shutting
  // down), or nullopt while it serves. /health answers 503 with it.
  std::optional<std::string> unavailable() const override;
  // Thread-safe. Refuses new requests with reason (503), sends every open request a 503 event
  // with it from this thread, and has the engine thread abort what it runs (freeing its KV and
  // queueing its pages for the KV store) and end after its current step.
  void shutdown(const std::string& reason) override;
  // Waits until the engine thread ended, or deadline: false when it is still inside a step (a
  // stuck one). Then the worker and its engine must not be destroyed: the process has to end
  // without them.
  bool stop(std::chrono::steady_clock::time_point deadline);
  // What the engine thread is doing ("inside a step for 12.5 s", "between steps"), for the log
  // of a stuck shutdown. Thread-safe.
  std::string activity() const;
  // Thread-safe: the tokens of the requests admitted and not yet started, n x (prompt +
  // max_tokens) each (the queue a cluster worker reports).
  int64_t queued_tokens() const;

 private:
  struct Entry {
    std::shared_ptr<OutputChannel> channel;
    std::chrono::steady_clock::time_point submitted;
    std::chrono::steady_clock::time_point last_token;
    int64_t queued_tokens = 0;  // what it counts against max_queued_tokens until it starts
    bool started = false;  // left the queue
    bool dropped = false;  // channel overflowed; the request was aborted
  };
  struct Pending {
    int64_t request_id = 0;
    int64_t queued_tokens = 0;
    Submission submission;
    std::chrono::steady_clock::time_point submitted;
  };

  void loop();
  void admit(Pending pending);
  // Aborts, then one step; a failure the engine did not pin on requests fails them all.
  void run_engine(const std::vector<int64_t>& aborts);
  // prefilled: a PROMPT engine's handover of this request (its prefill is done), sent along.
  void deliver(const RequestOutput& output, std::shared_ptr<const PrefilledRequest> prefilled);
  // Sends the request's last event, an error, and forgets it.
  void fail(int64_t request_id, int status, const std::string& message);
  void fail_all(int status, const std::string& message);
  // The device is lost (or the engine's state unknown): every request fails, none is taken.
  void disable(const std::string& why);
  void leave_queue(Entry& entry);
  void forget(int64_t request_id);
  void publish_gauges();
  // One round of the group without a forward of this rank's; whether another rank had one.
  bool join_group_round();

  EngineCore& engine_;
  Metrics& metrics_;
  WorkerLimits limits_;

  mutable std::mutex mutex_;  // guards the fields down to thread_done_
  std::condition_variable wake_;
  std::condition_variable done_;
  bool stop_ = false;
  std::optional<std::string> unavailable_;
  std::vector<Pending> inbox_;
  std::vector<int64_t> aborts_;
  int64_t next_request_id_ = 1;
  int64_t queued_requests_ = 0;
  int64_t queued_tokens_ = 0;
  // The channel of every request submitted and not yet ended, for shutdown().
  std::map<int64_t, std::shared_ptr<OutputChannel>> open_;
  bool thread_done_ = false;

  std::atomic<int64_t> step_began_ns_{0};  // steady_clock time while step() runs, else 0
  bool disabled_ = false;                  // engine thread only
  std::map<int64_t, Entry> entries_;       // engine thread only
  std::thread thread_;
};

}  // namespace deepinfer::server
