// ModelRunner: runs the engine's forward steps (docs/architecture.md, "The pipelined step loop").
// launch(step) hands a step over and returns a handle; collect(handle) returns its draws and host
// logits rows, or rethrows what the step threw. A synchronous runner runs the step inside
// launch. An asynchronous one runs the steps in launch order on its own thread, so the engine
// schedules and post-processes one step while the model runs the next; a step may then take
// input tokens from the draws of the step launched just before it, filled in when it starts.
// While a step is in flight only the runner's thread may use the model.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <future>
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
  std::vector<kernels::SampleParams> draws;  // the backend's draws (CausalLM::forward_sampled)
  std::vector<int32_t> host_rows;            // logit rows copied to the host
  // Empty, or per token of batch: -1 (its id is in batch.token_ids), or the index of the draw of
  // the previously launched step whose token it is.
  std::vector<int32_t> token_from_draw;
};

struct RunnerOutput {
  std::vector<int32_t> drawn;  // per draw
  std::vector<float> logits;   // [batch.logit_rows.size(), vocab]; the host_rows are filled
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
    int64_t handle = 0;
    RunnerStep step;
    std::promise<RunnerOutput> result;
  };
  void run(Job& job);
  void work();

  CausalLM& model_;
  const bool asynchronous_;
  int64_t next_handle_ = 0;
  std::map<int64_t, std::future<RunnerOutput>> results_;
  // The draws of the last step run, for the next step's token_from_draw (nullptr: it failed).
  std::shared_ptr<const std::vector<int32_t>> last_drawn_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<std::unique_ptr<Job>> queue_;
  bool stopping_ = false;
  std::thread worker_;  // started last, joined first
};

}  // namespace deepinfer
