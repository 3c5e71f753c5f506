// Gemma 3's image encoder on the host backends against transformers (gemma3_vision_check.h). Both
// land within float32 rounding: 5e-7 of the largest value for the tower, 2e-7 for the projector.
#include <gtest/gtest.h>

#include "gemma3_vision_check.h"

namespace deepinfer {
namespace {

class Siglip : public ::testing::TestWithParam<std::string> {};

TEST_P(Siglip, TowerAndProjectorMatchTransformers) {
  auto backend = make_backend(GetParam());
  ASSERT_TRUE(backend.ok()) << backend.error().message;
  testing::expect_gemma3_vision_matches_transformers(**backend, 5e-6);
}

INSTANTIATE_TEST_SUITE_P(HostBackends, Siglip, ::testing::Values("cpu", "ref"));

}  // namespace
}  // namespace deepinfer
