// The draft module and DraftVerifier on CUDA (float32 activations, batch-invariant kernels): the
// MTP module against the training run's model, and output with drafts equal to without.
#include <gtest/gtest.h>

#include "../engine/draft_verifier_cases.h"
#include "cuda_test_util.h"
#include "default_model_oracle.h"

namespace deepinfer::testing {
namespace {

// CUDA keeps the latent KV cache in the model's bf16 (the CPU in float32): the draft's logprobs
// moved by up to 1.35 % of (1 + |logprob|) on the H200 (2026-12-02), the confidences by < 2e-3.
TEST(CudaDraftModule, MatchesTheTrainingModel) {
  CudaModel loaded = load_on_cuda(draft_model_dir(), /*batch_invariant=*/true);
  expect_draft_module_matches(*loaded.model, 3e-2, 2e-3);
}

TEST(CudaDraftVerifier, OutputWithDraftsIsOutputWithoutThem) {
  CudaModel loaded = load_on_cuda(draft_model_dir(), /*batch_invariant=*/true);
  expect_drafts_keep_output(*loaded.model);
}

}  // namespace
}  // namespace deepinfer::testing
