// A small fixed-size thread pool: submit() returns a future, parallel_for() splits an index range
// over the workers and the calling thread.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <queue>
#include <thread>
#include <type_traits>
#include <vector>

namespace deepinfer {

// Thread-safe: any thread may submit or run parallel_for, including the pool's own workers
// (parallel_for never waits on a task that has not started, so nesting cannot deadlock).
// The destructor finishes the queued tasks, then joins.
class ThreadPool {
 public:
  // num_threads == 0 picks std::thread::hardware_concurrency() (at least 1).
  explicit ThreadPool(size_t num_threads = 0);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  size_t num_threads() const { return workers_.size(); }

  // Runs fn on a worker; the future carries its result or its exception.
  template <typename F>
  auto submit(F&& fn) -> std::future<std::invoke_result_t<F>> {
    using R = std::invoke_result_t<F>;
    auto task = std::make_shared<std::packaged_task<R()>>(std::forward<F>(fn));
    std::future<R> future = task->get_future();
    enqueue([task] { (*task)(); });
    return future;
  }

  // Calls body(i) once for every i in [begin, end), on the workers and the calling thread, and
  // returns when all calls are done. The first exception thrown by a call is rethrown here
  // (the remaining indices still run).
  void parallel_for(size_t begin, size_t end, const std::function<void(size_t)>& body);

 private:
  void enqueue(std::function<void()> task);
  void worker_loop();

  std::vector<std::thread> workers_;
  std::queue<std::function<void()>> tasks_;
  std::mutex mutex_;
  std::condition_variable cv_;
  bool stopping_ = false;
};

}  // namespace deepinfer
