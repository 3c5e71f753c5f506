// ThreadPool: workers pull tasks from one queue; parallel_for shares an atomic index counter.
#include "core/thread_pool.h"

#include <algorithm>
#include <atomic>
#include <exception>

namespace deepinfer {

ThreadPool::ThreadPool(size_t num_threads) {
  if (num_threads == 0) num_threads = std::max(1u, std::thread::hardware_concurrency());
  workers_.reserve(num_threads);
  for (size_t i = 0; i < num_threads; ++i) workers_.emplace_back([this] { worker_loop(); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  cv_.notify_all();
  for (std::thread& worker : workers_) worker.join();
}

void ThreadPool::enqueue(std::function<void()> task) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    tasks_.push(std::move(task));
  }
  cv_.notify_one();
}

void ThreadPool::worker_loop() {
  for (;;) {
    std::function<void()> task;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      cv_.wait(lock, [this] { return stopping_ || !tasks_.empty(); });
      if (tasks_.empty()) return;  // stopping and drained
      task = std::move(tasks_.front());
      tasks_.pop();
    }
    task();
  }
}

namespace {

// Shared by the caller and its helpers. A helper that starts after the caller has closed the
// loop touches nothing but this state, which it co-owns; so the caller never waits for a helper
// still sitting in the queue.
struct ParallelForState {
  std::atomic<size_t> next{0};
  size_t end = 0;
  const std::function<void(size_t)>* body = nullptr;
  std::mutex mutex;
  std::condition_variable done_cv;
  size_t num_active = 0;
  bool closed = false;
  std::exception_ptr error;

  void run_items() {
    for (size_t i = next.fetch_add(1); i < end; i = next.fetch_add(1)) {
      try {
        (*body)(i);
      } catch (...) {
        std::lock_guard<std::mutex> lock(mutex);
        if (!error) error = std::current_exception();
      }
    }
  }
};

}  // namespace

void ThreadPool::parallel_for(size_t begin, size_t end, const std::function<void(size_t)>& body) {
  if (begin >= end) return;
  auto state = std::make_shared<ParallelForState>();
  state->next = begin;
  state->end = end;
  state->body = &body;
  size_t num_helpers = std::min(workers_.size(), end - begin - 1);
  for (size_t h = 0; h < num_helpers; ++h) {
    enqueue([state] {
      {
        std::lock_guard<std::mutex> lock(state->mutex);
        if (state->closed) return;
        ++state->num_active;
      }
      state->run_items();
      std::lock_guard<std::mutex> lock(state->mutex);
      if (--state->num_active == 0) state->done_cv.notify_all();
    });
  }
  state->run_items();
  std::unique_lock<std::mutex> lock(state->mutex);
  state->closed = true;
  state->done_cv.wait(lock, [&] { return state->num_active == 0; });
  if (state->error) std::rethrow_exception(state->error);
}

}  // namespace deepinfer
