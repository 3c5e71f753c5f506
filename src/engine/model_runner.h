// ModelRunner: runs the engine's forward steps (docs/architecture.md, "The pipelined step loop").
// launch(step) hands a step over and returns a handle; collect(handle) returns its draws and host
// logits rows, or rethrows what the step threw. A synchronous runner runs the step inside
// launch. An asynchronous one returns before the step ran: on a device the step is enqueued from
// the calling thread (CausalLM::launch_sampled) and collect waits for its readback, never for the
// whole device; on the host, whose forward computes as it goes, the steps run in launch order on
// the runner's own thread. Either way the engine schedules and post-processes one step while the
// model runs the next, and a step may take input tokens from the draws of the step launched just
// before it (ForwardBatch::token_from_draw), where those draws are. While a step is in flight on
// the host thread only that thread may use the model.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "kernels/ops.h"
#include "model/model.h"

namespace deepinfer {

struct RunnerStep {
  ForwardBatch batch;
  std::vector<kernels::SampleParams> draws;  // the backend's draws (CausalLM::launch_sampled)
  std::vector<int32_t> host_rows;            // logit rows copied to the host
};

struct RunnerOutput {
  std::vector<int32_t> drawn;      // per draw
  std::vector<int32_t> host_rows;  // the logit rows that came back, ascending (a step without
                                   // draws: every row)
  std::vector<float> logits;       // [host_rows.size(), vocab], in host_rows' order
  // Logit row logit_row, which must be one of host_rows.
  const float* row(int32_t logit_row, int64_t vocab) const;
};

class ModelRunner {
 public:
  ModelRunner(CausalLM& model, bool asynchronous);
  ~ModelRunner();  // finishes the steps in flight
  ModelRunner(const ModelRunner&) = delete;
  ModelRunner& operator=(const ModelRunner&) = delete;

  bool asynchronous() const { return asynchronous_; }
  // Returns the step's handle. A step with token_from_draw needs the previous launch to have
  // had draws; if that step failed, this one fails too.
  int64_t launch(RunnerStep step);
  // Waits for the step (each handle is collected once, in any order).
  RunnerOutput collect(int64_t handle);

 private:
  struct Job {
    RunnerStep step;
    RunnerOutput out;
    std::unique_ptr<PendingCopies> copies;  // the step's readback (null: forward() copied already)
    std::exception_ptr error;
    bool done = false;  // launched (or failed); guarded by mutex_ on the host thread
  };
  // Launches the step: on a device it is enqueued, on the host it runs to the end.
  void start(Job& job);
  void work();

  CausalLM& model_;
  const bool asynchronous_;
  const bool on_host_thread_;  // asynchronous on a host backend
  int64_t next_handle_ = 0;
  std::map<int64_t, std::shared_ptr<Job>> jobs_;
  bool last_failed_ = false;  // the last step started failed: the next cannot take its draws
  std::mutex mutex_;
  std::condition_variable wake_;     // the host thread: a job queued, or stopping
  std::condition_variable finished_; // the engine: a job done
  std::deque<std::shared_ptr<Job>> queue_;
  bool stopping_ = false;
  std::thread worker_;  // started last, joined first
};

}  // namespace deepinfer
