// ThreadPool: results and exceptions through futures, parallel_for coverage, nesting.
#include "core/thread_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <stdexcept>
#include <vector>

namespace deepinfer {
namespace {

TEST(ThreadPool, SubmitReturnsResultsAndExceptions) {
  ThreadPool pool(3);
  std::vector<std::future<int>> futures;
  for (int i = 0; i < 50; ++i) futures.push_back(pool.submit([i] { return i * i; }));
  for (int i = 0; i < 50; ++i) EXPECT_EQ(futures[i].get(), i * i);
  auto failing = pool.submit([]() -> int { throw std::runtime_error("boom"); });
  EXPECT_THROW(failing.get(), std::runtime_error);
}

TEST(ThreadPool, ParallelForRunsEveryIndexOnce) {
  ThreadPool pool(4);
  std::vector<std::atomic<int>> hits(1000);
  pool.parallel_for(0, hits.size(), [&](size_t i) { hits[i].fetch_add(1); });
  for (const auto& hit : hits) EXPECT_EQ(hit.load(), 1);
  pool.parallel_for(5, 5, [&](size_t) { FAIL() << "empty range"; });
}

TEST(ThreadPool, NestedParallelForFromWorkersCompletes) {
  ThreadPool pool(2);
  std::atomic<int> total{0};
  pool.parallel_for(0, 8, [&](size_t) { pool.parallel_for(0, 100, [&](size_t) { total.fetch_add(1); }); });
  EXPECT_EQ(total.load(), 800);
}

TEST(ThreadPool, ParallelForRethrowsAfterFinishing) {
  ThreadPool pool(2);
  std::atomic<int> done{0};
  EXPECT_THROW(pool.parallel_for(0, 100,
                                 [&](size_t i) {
                                   done.fetch_add(1);
                                   if (i == 17) throw std::runtime_error("bad index");
                                 }),
               std::runtime_error);
  EXPECT_EQ(done.load(), 100);
}

}  // namespace
}  // namespace deepinfer
