// Logits processors: cases worked out by hand (all values exact in float32), including ones
// whose answer changes if the processors run in another order.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "sampling/logits_processor.h"

namespace deepinfer {
namespace {

const std::vector<float> kLogits = {2.0f, -1.0f, 0.5f, 3.0f, -2.0f, 1.0f};
const std::vector<int32_t> kPrompt = {0, 1, 0};
const std::vector<int32_t> kOutput = {3, 3, 2, 4};
const std::vector<int32_t> kEos = {5};

std::vector<float> processed(const SamplingParams& params, const std::vector<int32_t>& output = kOutput,
                             const std::vector<int32_t>& eos = kEos) {
  std::vector<float> logits = kLogits;
  apply_logits_processors(logits.data(), ssize(logits), params, kPrompt, output, eos);
  return logits;
}

TEST(LogitsProcessor, DefaultsChangeNothing) { EXPECT_EQ(processed(SamplingParams{}), kLogits); }

TEST(LogitsProcessor, RepetitionPenaltyDividesPositivesAndMultipliesNegativesOnce) {
  SamplingParams p;
  p.repetition_penalty = 2.0;
  // Seen in prompt or output: 0 (twice), 1, 2, 3 (twice), 4. Token 5 is untouched.
  EXPECT_EQ(processed(p), (std::vector<float>{1.0f, -2.0f, 0.25f, 1.5f, -4.0f, 1.0f}));
  p.repetition_penalty = 0.5;  // below 1 it rewards repetition
  EXPECT_EQ(processed(p), (std::vector<float>{4.0f, -0.5f, 1.0f, 6.0f, -1.0f, 1.0f}));
}

TEST(LogitsProcessor, FrequencyAndPresenceCountOnlyOutputTokens) {
  SamplingParams p;
  p.frequency_penalty = 0.5;  // output counts: 3 x2, 2 x1, 4 x1; prompt tokens 0, 1 untouched
  EXPECT_EQ(processed(p), (std::vector<float>{2.0f, -1.0f, 0.0f, 2.0f, -2.5f, 1.0f}));
  p = {};
  p.presence_penalty = 0.25;
  EXPECT_EQ(processed(p), (std::vector<float>{2.0f, -1.0f, 0.25f, 2.75f, -2.25f, 1.0f}));
  p = {};
  p.frequency_penalty = -1.0;  // negative values encourage repetition
  p.presence_penalty = -0.5;
  EXPECT_EQ(processed(p), (std::vector<float>{2.0f, -1.0f, 2.0f, 5.5f, -0.5f, 1.0f}));
}

TEST(LogitsProcessor, AllPenaltiesTogether) {
  SamplingParams p;
  p.repetition_penalty = 2.0;
  p.frequency_penalty = 0.5;
  p.presence_penalty = 0.25;
  // Repetition first: {1, -2, 0.25, 1.5, -4, 1}; then frequency: 3 -> 1.5 - 2 * 0.5 = 0.5,
  // 2 -> 0.25 - 0.5 = -0.25, 4 -> -4.5; then presence: 0.25, -0.5, -4.75.
  EXPECT_EQ(processed(p), (std::vector<float>{1.0f, -2.0f, -0.5f, 0.25f, -4.75f, 1.0f}));
}

TEST(LogitsProcessor, LogitBiasIsAddedBeforeThePenalties) {
  SamplingParams p;
  p.logit_bias = {{1, 3.5f}, {5, -100.0f}};
  EXPECT_EQ(processed(p), (std::vector<float>{2.0f, 2.5f, 0.5f, 3.0f, -2.0f, -99.0f}));
  // Token 1 (in the prompt): (-1 + 3.5) / 2 = 1.25; penalising first would give -2 + 3.5 = 1.5.
  p.repetition_penalty = 2.0;
  EXPECT_EQ(processed(p)[1], 1.25f);
  // Token 2 (once in the output): 0.5 + 1.5 = 2 -> /2 = 1 -> -0.5 = 0.5.
  p.logit_bias = {{2, 1.5f}};
  p.frequency_penalty = 0.5;
  EXPECT_EQ(processed(p)[2], 0.5f);
}

TEST(LogitsProcessor, MinTokensMasksEosAndStopTokensUntilReached) {
  SamplingParams p;
  p.min_tokens = 5;
  p.stop_token_ids = {2};
  const float inf = INFINITY;
  // 4 outputs < 5: eos (5) and stop token 2 are masked, nothing else changes.
  EXPECT_EQ(processed(p), (std::vector<float>{2.0f, -1.0f, -inf, 3.0f, -2.0f, -inf}));
  // At 5 outputs the mask lifts.
  EXPECT_EQ(processed(p, {3, 3, 2, 4, 0}), kLogits);
  p.min_tokens = 4;
  EXPECT_EQ(processed(p), kLogits);
  // eos stays masked under ignore_eos (vLLM masks it either way), and a logit bias cannot undo
  // the mask.
  p.min_tokens = 5;
  p.ignore_eos = true;
  p.logit_bias = {{5, 100.0f}};
  p.repetition_penalty = 2.0;
  EXPECT_EQ(processed(p)[5], -inf);
  // Several eos ids (Llama 3 has three).
  EXPECT_EQ(processed(p, kOutput, {0, 5})[0], -inf);
}

TEST(LogitsProcessor, ZeroLogitStaysZeroUnderRepetitionPenalty) {
  SamplingParams p;
  p.repetition_penalty = 1.5;
  std::vector<float> logits = {0.0f, 1.0f};
  const std::vector<int32_t> prompt = {0};
  apply_logits_processors(logits.data(), 2, p, prompt, {}, {});
  EXPECT_EQ(logits, (std::vector<float>{0.0f, 1.0f}));
}

}  // namespace
}  // namespace deepinfer
