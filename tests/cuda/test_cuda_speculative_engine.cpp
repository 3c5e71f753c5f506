// The engine's speculative decoding on CUDA (batch-invariant kernels): output with drafts equal to
// without, at K = 1 and 3, varlen and fixed, under preemption (speculative_engine_cases.h); and
// replayed drafts on GQA layers, whose verify rows go in as one-token sequences and replay decode
// graphs (the fused front end's part: test_cuda_attention_front_fold.cpp).
#include <gtest/gtest.h>

#include "../engine/speculative_engine_cases.h"
#include "bf16_model.h"
#include "cuda_test_util.h"

namespace deepinfer::testing {
namespace {

TEST(CudaSpeculativeEngine, OutputWithDraftsIsOutputWithoutThem) {
  CudaModel loaded = load_on_cuda(speculative_model_dir(), /*batch_invariant=*/true);
  expect_speculation_keeps_output(*loaded.model);
}

TEST(CudaSpeculativeEngine, ReplayedDraftsOnGqaLayersReplayDecodeGraphs) {
  for (const char* fixture : {"llama", "qwen3"}) {  // qwen3: q/k norms in the front end
    SCOPED_TRACE(fixture);
    CudaModel loaded = load_on_cuda(write_bf16_copy(fixture_dir(fixture), fixture), /*batch_invariant=*/true);
    // 3 requests of 24 tokens verifying 4 rows a step: more than 4 steps each unless eager.
    EXPECT_GE(expect_replayed_drafts_keep_output(*loaded.model), 4);
  }
}

}  // namespace
}  // namespace deepinfer::testing
