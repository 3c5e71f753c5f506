// Runs every engine test on one OpenMP thread unless the test asks for more (ScopedThreads in
// engine_test_util.h): the tests that vary the thread count say so.
#include <gtest/gtest.h>
#include <omp.h>

namespace {

class OneThread : public ::testing::Environment {
 public:
  void SetUp() override { omp_set_num_threads(1); }
};

const ::testing::Environment* const kOneThread = ::testing::AddGlobalTestEnvironment(new OneThread);

}  // namespace
