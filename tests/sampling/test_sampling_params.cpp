// SamplingParams::validate: each field's documented range, boundaries included, and an error
// that names the field.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "deepinfer/sampling_params.h"

namespace deepinfer {
namespace {

constexpr int64_t kVocab = 100;

struct Case {
  const char* field;  // must appear in the error
  std::function<void(SamplingParams&)> set;
};

TEST(SamplingParams, DefaultsAreValidAndMatchTheApi) {
  const SamplingParams p;
  EXPECT_TRUE(p.validate(kVocab).ok());
  EXPECT_EQ(p.n, 1);
  EXPECT_EQ(p.temperature, 1.0);
  EXPECT_EQ(p.max_tokens, 16);
  EXPECT_EQ(p.min_tokens, 0);
  EXPECT_FALSE(p.seed.has_value());
  EXPECT_FALSE(p.logprobs.has_value());
  EXPECT_TRUE(p.skip_special_tokens);
  EXPECT_FALSE(p.include_stop_str_in_output);
}

TEST(SamplingParams, RejectsEachOutOfRangeFieldByName) {
  const std::vector<Case> bad = {
      {"n", [](SamplingParams& p) { p.n = 0; }},
      {"temperature", [](SamplingParams& p) { p.temperature = -0.1; }},
      {"temperature", [](SamplingParams& p) { p.temperature = NAN; }},
      {"top_p", [](SamplingParams& p) { p.top_p = 0.0; }},
      {"top_p", [](SamplingParams& p) { p.top_p = 1.01; }},
      {"top_k", [](SamplingParams& p) { p.top_k = -2; }},
      {"min_p", [](SamplingParams& p) { p.min_p = -0.1; }},
      {"min_p", [](SamplingParams& p) { p.min_p = 1.5; }},
      {"presence_penalty", [](SamplingParams& p) { p.presence_penalty = 2.01; }},
      {"frequency_penalty", [](SamplingParams& p) { p.frequency_penalty = -2.01; }},
      {"repetition_penalty", [](SamplingParams& p) { p.repetition_penalty = 0.0; }},
      {"repetition_penalty", [](SamplingParams& p) { p.repetition_penalty = INFINITY; }},
      {"logit_bias", [](SamplingParams& p) { p.logit_bias[kVocab] = 1.0f; }},
      {"logit_bias", [](SamplingParams& p) { p.logit_bias[-1] = 1.0f; }},
      {"logit_bias[3]", [](SamplingParams& p) { p.logit_bias[3] = 100.5f; }},
      {"stop[1]", [](SamplingParams& p) { p.stop = {"a", ""}; }},
      {"stop_token_ids[0]", [](SamplingParams& p) { p.stop_token_ids = {kVocab}; }},
      {"max_tokens", [](SamplingParams& p) { p.max_tokens = -1; }},
      {"min_tokens", [](SamplingParams& p) { p.min_tokens = 17; }},
      {"min_tokens", [](SamplingParams& p) { p.min_tokens = -1; }},
      {"logprobs", [](SamplingParams& p) { p.logprobs = 21; }},
      {"logprobs", [](SamplingParams& p) { p.logprobs = -1; }},
      {"prompt_logprobs", [](SamplingParams& p) { p.prompt_logprobs = 21; }},
  };
  for (const Case& c : bad) {
    SamplingParams p;
    c.set(p);
    const Result<void> result = p.validate(kVocab);
    ASSERT_FALSE(result.ok()) << c.field;
    EXPECT_EQ(result.error().message.rfind(c.field, 0), 0u) << result.error().message;
  }
}

TEST(SamplingParams, AcceptsEachRangesBoundaries) {
  const std::vector<std::function<void(SamplingParams&)>> good = {
      [](SamplingParams& p) { p.temperature = 0.0; },
      [](SamplingParams& p) { p.top_p = 1.0; },
      [](SamplingParams& p) { p.top_k = -1; },
      [](SamplingParams& p) { p.top_k = 0; },
      [](SamplingParams& p) { p.min_p = 1.0; },
      [](SamplingParams& p) {
        p.presence_penalty = -2.0;
        p.frequency_penalty = 2.0;
      },
      [](SamplingParams& p) { p.repetition_penalty = 0.01; },
      [](SamplingParams& p) { p.logit_bias = {{0, -100.0f}, {kVocab - 1, 100.0f}}; },
      [](SamplingParams& p) { p.stop_token_ids = {0, kVocab - 1}; },
      [](SamplingParams& p) {
        p.max_tokens = 0;
        p.min_tokens = 0;
      },
      [](SamplingParams& p) { p.min_tokens = 16; },
      [](SamplingParams& p) {
        p.logprobs = 0;
        p.prompt_logprobs = 20;
      },
  };
  for (size_t i = 0; i < good.size(); ++i) {
    SamplingParams p;
    good[i](p);
    const Result<void> result = p.validate(kVocab);
    EXPECT_TRUE(result.ok()) << "case " << i << ": " << result.error().message;
  }
}

}  // namespace
}  // namespace deepinfer
