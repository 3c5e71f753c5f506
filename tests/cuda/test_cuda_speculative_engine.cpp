// The engine's speculative decoding on CUDA (batch-invariant kernels): output with drafts equal to
// without, at K = 1 and 3, varlen and fixed, under preemption (speculative_engine_cases.h).
#include <gtest/gtest.h>

#include "../engine/speculative_engine_cases.h"
#include "cuda_test_util.h"

namespace deepinfer::testing {
namespace {

TEST(CudaSpeculativeEngine, OutputWithDraftsIsOutputWithoutThem) {
  CudaModel loaded = load_on_cuda(speculative_model_dir(), /*batch_invariant=*/true);
  expect_speculation_keeps_output(*loaded.model);
}

}  // namespace
}  // namespace deepinfer::testing
