// DraftVerifier on the CPU: draft_verifier_cases.h, and what it refuses.
#include <gtest/gtest.h>

#include <string>

#include "draft_verifier_cases.h"
#include "runtime/backend.h"

namespace deepinfer {
namespace {

TEST(DraftVerifier, OutputWithDraftsIsOutputWithoutThem) {
  BackendOptions invariant;
  invariant.batch_invariant = true;
  auto backend = make_backend("cpu", invariant);
  ASSERT_TRUE(backend.ok()) << backend.error().message;
  auto model = load_model(testing::draft_model_dir(), **backend, false);
  ASSERT_TRUE(model.ok()) << model.error().message;
  testing::expect_drafts_keep_output(**model);
}

TEST(DraftVerifier, RefusesWhatItCannotRun) {
  auto backend = make_backend("cpu");
  ASSERT_TRUE(backend.ok());
  auto model = load_model(testing::draft_model_dir(), **backend, false);
  ASSERT_TRUE(model.ok()) << model.error().message;
  DraftVerifier verifier(**model, 32);
  DraftStats stats;
  GenerateOptions options;
  options.max_tokens = 4;
  EXPECT_FALSE(verifier.generate({}, options, 2, &stats).ok());
  EXPECT_FALSE(verifier.generate({5, 6}, options, 0, &stats).ok());
  GenerateOptions bad = options;
  bad.sampling.top_p = 1.5;
  EXPECT_FALSE(verifier.generate({5, 6}, bad, 2, &stats).ok());
  GenerateOptions long_run = options;
  long_run.max_tokens = 30;
  const auto too_long = verifier.generate({5, 6}, long_run, 2, &stats);
  ASSERT_FALSE(too_long.ok());
  EXPECT_NE(too_long.error().message.find("positions"), std::string::npos) << too_long.error().message;
  // A model without a draft module: an error naming what is missing, not a crash.
  auto plain = load_model(std::string(DEEPINFER_TEST_DATA_DIR) + "/llama", **backend, false);
  ASSERT_TRUE(plain.ok()) << plain.error().message;
  DraftVerifier no_drafts(**plain, 32);
  const auto refused = no_drafts.generate({5, 6}, options, 2, &stats);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.error().message.find("draft module"), std::string::npos) << refused.error().message;
}

}  // namespace
}  // namespace deepinfer
