// Gemma 3's image encoder on CUDA against transformers (tests/model/gemma3_vision_check.h): the
// fixture's float32 weights, so no product rounds to bf16.
#include <gtest/gtest.h>

#include "cuda_test_util.h"
#include "gemma3_vision_check.h"

namespace deepinfer {
namespace {

TEST(CudaSiglip, TowerAndProjectorMatchTransformers) {
  std::unique_ptr<Backend> backend = testing::cuda_backend();
  testing::expect_gemma3_vision_matches_transformers(*backend, 1e-4);
}

TEST(CudaSiglip, ImagePromptMatchesTransformers) {
  std::unique_ptr<Backend> backend = testing::cuda_backend();
  testing::expect_gemma3_image_prompt_matches_transformers(*backend, 1e-4);
}

TEST(CudaSiglip, TwoImagePromptMatchesTransformers) {
  std::unique_ptr<Backend> backend = testing::cuda_backend();
  testing::expect_gemma3_two_image_prompt_matches_transformers(*backend);
}

}  // namespace
}  // namespace deepinfer
