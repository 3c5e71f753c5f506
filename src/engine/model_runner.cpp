#include "engine/model_runner.h"

#ifdef _OPENMP
#include <omp.h>
#endif

#include <stdexcept>
#include <utility>

#include "core/check.h"

namespace deepinfer {

ModelRunner::ModelRunner(CausalLM& model, bool asynchronous) : model_(model), asynchronous_(asynchronous) {
  if (!asynchronous_) return;
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
  if (!worker_.joinable()) return;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  worker_.join();
}

int64_t ModelRunner::launch(RunnerStep step) {
  auto job = std::make_unique<Job>();
  job->handle = next_handle_++;
  job->step = std::move(step);
  results_.emplace(job->handle, job->result.get_future());
  const int64_t handle = job->handle;
  if (!asynchronous_) {
    run(*job);
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
  auto it = results_.find(handle);
  DI_CHECK(it != results_.end(), "step " << handle << " was not launched or was collected already");
  std::future<RunnerOutput> result = std::move(it->second);
  results_.erase(it);
  return result.get();
}

void ModelRunner::run(Job& job) {
  RunnerStep& step = job.step;
  try {
    if (!step.token_from_draw.empty()) {
      if (!last_drawn_) throw std::runtime_error("the step this one continues failed");
      for (size_t t = 0; t < step.token_from_draw.size(); ++t) {
        const int32_t draw = step.token_from_draw[t];
        if (draw >= 0) step.batch.token_ids[t] = last_drawn_->at(static_cast<size_t>(draw));
      }
    }
    RunnerOutput out;
    out.logits.resize(step.batch.logit_rows.size() * static_cast<size_t>(model_.config().vocab_size));
    out.drawn.resize(step.draws.size());
    if (step.draws.empty()) {
      model_.forward(step.batch, out.logits.data());
    } else {
      model_.forward_sampled(step.batch, step.draws, out.drawn.data(), step.host_rows, out.logits.data());
    }
    last_drawn_ = std::make_shared<const std::vector<int32_t>>(out.drawn);
    job.result.set_value(std::move(out));
  } catch (...) {
    last_drawn_ = nullptr;
    job.result.set_exception(std::current_exception());
  }
}

void ModelRunner::work() {
  for (;;) {
    std::unique_ptr<Job> job;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      wake_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping, nothing left
      job = std::move(queue_.front());
      queue_.pop_front();
    }
    run(*job);
  }
}

}  // namespace deepinfer
