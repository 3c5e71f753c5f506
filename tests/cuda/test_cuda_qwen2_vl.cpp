// Qwen2.5-VL and Qwen3-VL on CUDA against transformers (tests/model/qwen2_vl_check.h): the
// fixtures' float32 weights, so no product rounds to bf16.
#include <gtest/gtest.h>

#include "cuda_test_util.h"
#include "qwen2_vl_check.h"

namespace deepinfer {
namespace {

TEST(CudaQwen2Vl, EncoderAndImagePromptMatchTransformers) {
  std::unique_ptr<Backend> backend = testing::cuda_backend();
  testing::expect_qwen_vl_matches_transformers(*backend, 1e-4);
}

TEST(CudaQwen3Vl, EncoderAndImagePromptMatchTransformers) {
  std::unique_ptr<Backend> backend = testing::cuda_backend();
  testing::expect_qwen_vl_matches_transformers(*backend, 1e-4, "qwen3_vl");
}

TEST(CudaQwen2Vl, TwoImagePromptMatchesTransformers) {
  std::unique_ptr<Backend> backend = testing::cuda_backend();
  testing::expect_qwen_vl_two_image_prompt_matches_transformers(*backend, "qwen2_5_vl");
}

TEST(CudaQwen3Vl, TwoImagePromptMatchesTransformers) {
  std::unique_ptr<Backend> backend = testing::cuda_backend();
  testing::expect_qwen_vl_two_image_prompt_matches_transformers(*backend, "qwen3_vl");
}

}  // namespace
}  // namespace deepinfer
