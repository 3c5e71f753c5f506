#include "engine/model_runner.h"

#ifdef _OPENMP
#include <omp.h>
#endif

#include <algorithm>
#include <numeric>
#include <stdexcept>
#include <utility>

#include "core/check.h"

namespace deepinfer {

ModelRunner::ModelRunner(CausalLM& model, bool asynchronous)
    : model_(model),
      asynchronous_(asynchronous),
      on_host_thread_(asynchronous && !model.backend().device_memory()) {
  if (!on_host_thread_) return;
#ifdef _OPENMP
  // The host kernels' thread count (--threads) is the creating thread's setting; a new thread
  // would start from the default.
  const int threads = omp_get_max_threads();
  worker_ = std::thread([this, threads] {
    omp_set_num_threads(threads);
    work();
  });
#else
  worker_ = std::thread([this] { work(); });
#endif
}

ModelRunner::~ModelRunner() {
  if (worker_.joinable()) {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stopping_ = true;
    }
    wake_.notify_all();
    worker_.join();
  }
  jobs_.clear();  // their readbacks wait for the device
}

int64_t ModelRunner::launch(RunnerStep step) {
  auto job = std::make_shared<Job>();
  job->step = std::move(step);
  const int64_t handle = next_handle_++;
  jobs_.emplace(handle, job);
  if (!on_host_thread_) {
    start(*job);
    return handle;
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    queue_.push_back(std::move(job));
  }
  wake_.notify_one();
  return handle;
}

RunnerOutput ModelRunner::collect(int64_t handle) {
  auto it = jobs_.find(handle);
  DI_CHECK(it != jobs_.end(), "step " << handle << " was not launched or was collected already");
  std::shared_ptr<Job> job = std::move(it->second);
  jobs_.erase(it);
  if (on_host_thread_) {
    std::unique_lock<std::mutex> lock(mutex_);
    finished_.wait(lock, [&] { return job->done; });
  }
  if (job->error) std::rethrow_exception(job->error);
  if (job->copies) job->copies->wait();
  return std::move(job->out);
}

const float* RunnerOutput::row(int32_t logit_row, int64_t vocab) const {
  const auto it = std::lower_bound(host_rows.begin(), host_rows.end(), logit_row);
  DI_CHECK(it != host_rows.end() && *it == logit_row, "logit row " << logit_row << " did not come back to the host");
  return logits.data() + static_cast<size_t>(it - host_rows.begin()) * static_cast<size_t>(vocab);
}

void ModelRunner::start(Job& job) {
  RunnerStep& step = job.step;
  try {
    if (!step.batch.token_from_draw.empty() && last_failed_) {
      throw std::runtime_error("the step this one continues failed");
    }
    const auto vocab = static_cast<size_t>(model_.config().vocab_size);
    RunnerOutput& out = job.out;
    if (step.draws.empty()) {
      out.host_rows.resize(step.batch.logit_rows.size());
      std::iota(out.host_rows.begin(), out.host_rows.end(), 0);
      out.logits.resize(out.host_rows.size() * vocab);
      model_.forward(step.batch, out.logits.data());  // copies its logits before it returns
    } else {
      // Only the rows the host reads: a decode step's logits are vocab floats a row, far more
      // than the host should touch while the device runs the next step.
      out.host_rows = std::move(step.host_rows);
      out.logits.resize(out.host_rows.size() * vocab);
      out.drawn.resize(step.draws.size());
      job.copies = model_.launch_sampled(step.batch, step.draws, out.drawn.data(), out.host_rows, out.logits.data());
    }
    last_failed_ = false;
  } catch (...) {
    last_failed_ = true;
    job.error = std::current_exception();
  }
}

void ModelRunner::work() {
  for (;;) {
    std::shared_ptr<Job> job;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      wake_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping, nothing left
      job = std::move(queue_.front());
      queue_.pop_front();
    }
    start(*job);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      job->done = true;
    }
    finished_.notify_all();
  }
}

}  // namespace deepinfer
