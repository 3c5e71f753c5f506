// Side work (Backend::begin_side_work, the CUDA backend's second stream): ops enqueued after the
// join see everything the side work wrote, eagerly and in a replayed graph; a graph ends joined;
// side work does not nest. The side work here is long (tens of passes over 128 MB) so that an op
// not ordered after it would read its buffer half written.
#include <gtest/gtest.h>

#include <vector>

#include "cuda_test_util.h"

namespace deepinfer::testing {
namespace {

constexpr int64_t kCount = int64_t{32} << 20;  // floats: 128 MB
constexpr int kPasses = 24;

// buffer += ones, kPasses times, on the side; other = 2 * other beside it on the main stream.
void enqueue_fork(Backend& backend, DeviceBuffer& buffer, const DeviceBuffer& ones, DeviceBuffer& other) {
  backend.begin_side_work();
  for (int pass = 0; pass < kPasses; ++pass) {
    backend.add(buffer.as<float>(), ones.as<float>(), kCount, buffer.as<float>());
  }
  backend.end_side_work();
  backend.scale(other.as<float>(), kCount, 2.0f, other.as<float>());
}

void expect_all(const std::vector<float>& values, float want, const char* what) {
  int64_t wrong = 0;
  for (float v : values) wrong += v != want;
  EXPECT_EQ(wrong, 0) << what << ": " << wrong << " of " << values.size() << " values are not " << want;
}

TEST(CudaSideWork, LaterOpsSeeTheJoinedSideWork) {
  auto backend = cuda_backend();
  DeviceBuffer buffer = upload(*backend, std::vector<float>(kCount, 0.0f));
  DeviceBuffer ones = upload(*backend, std::vector<float>(kCount, 1.0f));
  DeviceBuffer other = upload(*backend, std::vector<float>(kCount, 1.0f));
  DeviceBuffer sum = backend->allocate(kCount * sizeof(float));
  for (int round = 1; round <= 2; ++round) {
    enqueue_fork(*backend, buffer, ones, other);
    backend->join_side_work();
    backend->add(buffer.as<float>(), other.as<float>(), kCount, sum.as<float>());
    const float passes = static_cast<float>(round * kPasses);
    const float doubled = round == 1 ? 2.0f : 4.0f;
    expect_all(download<float>(*backend, sum, kCount), passes + doubled, "buffer + other after the join");
    expect_all(download<float>(*backend, buffer, kCount), passes, "the side work's buffer");
  }
}

TEST(CudaSideWork, ReplayedForkAndJoin) {
  auto backend = cuda_backend();
  ASSERT_TRUE(backend->can_capture());
  DeviceBuffer buffer = upload(*backend, std::vector<float>(kCount, 0.0f));
  DeviceBuffer ones = upload(*backend, std::vector<float>(kCount, 1.0f));
  DeviceBuffer other = upload(*backend, std::vector<float>(kCount, 1.0f));
  DeviceBuffer sum = backend->allocate(kCount * sizeof(float));
  backend->begin_capture();
  enqueue_fork(*backend, buffer, ones, other);
  backend->join_side_work();
  backend->add(buffer.as<float>(), other.as<float>(), kCount, sum.as<float>());
  auto graph = backend->end_capture();
  ASSERT_NE(graph, nullptr);
  expect_all(download<float>(*backend, buffer, kCount), 0.0f, "before any replay");
  backend->replay(*graph);
  backend->replay(*graph);
  expect_all(download<float>(*backend, sum, kCount), 2.0f * kPasses + 4.0f, "buffer + other after two replays");
}

TEST(CudaSideWork, CaptureEndsJoinedAndSideWorkDoesNotNest) {
  auto backend = cuda_backend();
  DeviceBuffer buffer = upload(*backend, std::vector<float>(kCount, 0.0f));
  DeviceBuffer ones = upload(*backend, std::vector<float>(kCount, 1.0f));
  DeviceBuffer other = upload(*backend, std::vector<float>(kCount, 1.0f));
  // A capture left with side work open (a failed op) still ends, and its graph waits for the side.
  backend->begin_capture();
  backend->begin_side_work();
  backend->add(buffer.as<float>(), ones.as<float>(), kCount, buffer.as<float>());
  auto graph = backend->end_capture();
  ASSERT_NE(graph, nullptr);
  backend->replay(*graph);
  expect_all(download<float>(*backend, buffer, kCount), 1.0f, "the open side work's output");

  backend->begin_side_work();
  EXPECT_THROW(backend->begin_side_work(), std::exception);
  backend->end_side_work();
  backend->join_side_work();
  enqueue_fork(*backend, buffer, ones, other);
  backend->join_side_work();
  expect_all(download<float>(*backend, buffer, kCount), 1.0f + kPasses, "side work after the refused nesting");
}

}  // namespace
}  // namespace deepinfer::testing
