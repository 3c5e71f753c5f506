// DraftVerifier on the CPU: draft_verifier_cases.h, and what it refuses.
#include <gtest/gtest.h>

#include <numeric>
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

// Replayed drafts (a plain run's output, corrupted at a rate): the output is still plain
// decoding's, and acceptance follows the rate, on a model with no draft module too.
TEST(DraftVerifier, ReplayedDraftsAreAcceptedAtTheirRate) {
  BackendOptions invariant;
  invariant.batch_invariant = true;
  auto backend = make_backend("cpu", invariant);
  ASSERT_TRUE(backend.ok()) << backend.error().message;
  for (const std::string& dir : {testing::draft_model_dir(), std::string(DEEPINFER_TEST_DATA_DIR) + "/llama"}) {
    auto model = load_model(dir, **backend, false);
    ASSERT_TRUE(model.ok()) << model.error().message;
    const std::vector<int32_t> prompt = {5, 17, 42, 7, 99, 3};
    GenerateOptions options;
    options.max_tokens = 40;
    options.ignore_eos = true;
    options.sampling.temperature = 0.0;
    Generator plain(**model, 16, 128);
    auto want = plain.generate(prompt, options);
    ASSERT_TRUE(want.ok()) << want.error().message;
    for (const double rate : {0.0, 0.3, 1.0}) {
      DraftReplay replay{*want, rate, 3};
      DraftVerifier verifier(**model, 128);
      DraftStats stats;
      auto got = verifier.generate(prompt, options, 3, &stats, &replay);
      ASSERT_TRUE(got.ok()) << got.error().message;
      EXPECT_EQ(*got, *want) << dir << ", rate " << rate;
      EXPECT_EQ(stats.draft_forwards, 0);
      const auto& first = stats.depths.front().accepted;
      const double acceptance = std::accumulate(first.begin(), first.end(), 0.0) / static_cast<double>(first.size());
      // At 0.3 the 13-14 rounds' first drafts are accepted about 70 % of the time.
      const double low = rate == 0.0 ? 1.0 : rate == 1.0 ? 0.0 : 0.3;
      const double high = rate == 0.0 ? 1.0 : rate == 1.0 ? 0.0 : 0.95;
      EXPECT_GE(acceptance, low) << dir << ", rate " << rate;
      EXPECT_LE(acceptance, high) << dir << ", rate " << rate;
    }
  }
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
