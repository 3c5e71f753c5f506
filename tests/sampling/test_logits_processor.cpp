// Logits processors: cases worked out by hand (all values exact in float32), including ones
// whose answer changes if the processors run in another order; and the incremental
// PenaltyHistory against the stateless processors on random histories.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <random>
#include <vector>

#include "core/check.h"
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

std::vector<uint32_t> bits(const std::vector<float>& values) {
  std::vector<uint32_t> out;
  for (float v : values) out.push_back(std::bit_cast<uint32_t>(v));
  return out;
}

// Each random history is grown one output at a time; after every append the processors applied
// through the PenaltyHistory give the stateless result bit for bit. Part way through, the history
// is copied (a forked sample) and both copies grow apart.
TEST(PenaltyHistory, EqualsTheStatelessProcessorsAfterEveryAppend) {
  std::mt19937 rng(7);
  const auto uniform = [&](double lo, double hi) { return std::uniform_real_distribution<double>(lo, hi)(rng); };
  const auto pick = [&](int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(rng); };
  const std::vector<int32_t> no_eos;
  for (int trial = 0; trial < 200; ++trial) {
    const int64_t vocab = trial % 10 == 0 ? pick(1, 3) : pick(2, trial % 10 == 5 ? 50000 : 300);
    // Ids drawn from a narrow range repeat often; from the whole vocabulary, rarely.
    const int64_t id_range = pick(1, vocab);
    const auto token = [&] { return static_cast<int32_t>(pick(0, id_range - 1)); };
    SamplingParams params;
    params.repetition_penalty = pick(0, 3) == 0 ? 1.0 : uniform(0.3, 3.0);
    params.frequency_penalty = pick(0, 2) == 0 ? 0.0 : uniform(-2.0, 2.0);
    params.presence_penalty = pick(0, 2) == 0 ? 0.0 : uniform(-2.0, 2.0);
    params.min_tokens = static_cast<int32_t>(pick(0, 5));
    if (pick(0, 1) == 0) params.logit_bias[token()] = static_cast<float>(uniform(-5.0, 5.0));
    std::vector<int32_t> prompt(static_cast<size_t>(pick(0, 300)));
    for (int32_t& id : prompt) id = token();
    std::vector<float> logits(static_cast<size_t>(vocab));
    for (float& l : logits) l = pick(0, 9) == 0 ? 0.0f : static_cast<float>(uniform(-30.0, 30.0));
    const std::vector<int32_t> eos = {static_cast<int32_t>(pick(0, vocab - 1))};

    struct Sample {
      PenaltyHistory history;
      std::vector<int32_t> outputs;
    };
    std::vector<Sample> samples = {{PenaltyHistory(vocab, prompt), {}}};
    const auto num_outputs = static_cast<size_t>(pick(0, 200));
    const size_t fork_at = static_cast<size_t>(pick(0, static_cast<int64_t>(num_outputs)));
    for (size_t step = 0; step <= num_outputs; ++step) {
      if (step == fork_at) samples.push_back(samples.front());
      for (size_t s = 0; s < samples.size(); ++s) {
        Sample& sample = samples[s];
        std::vector<float> want = logits;
        apply_logits_processors(want.data(), vocab, params, prompt, sample.outputs, eos);
        std::vector<float> got = logits;
        apply_logits_processors(got.data(), vocab, params, sample.outputs.size(), &sample.history, eos);
        ASSERT_EQ(bits(got), bits(want)) << "trial " << trial << " sample " << s << " after " << step << " outputs";
        const int32_t next = token();
        sample.outputs.push_back(next);
        sample.history.append_output(next);
      }
    }
  }
}

TEST(PenaltyHistory, AHistoryIsNeededOnlyWhenAPenaltyIsSet) {
  SamplingParams p;
  p.logit_bias = {{1, 1.0f}};
  std::vector<float> logits = kLogits;
  apply_logits_processors(logits.data(), ssize(logits), p, kOutput.size(), nullptr, kEos);
  EXPECT_EQ(logits, processed(p));
  p.presence_penalty = 0.5;
  EXPECT_THROW(apply_logits_processors(logits.data(), ssize(logits), p, kOutput.size(), nullptr, kEos),
               InvariantError);
}

}  // namespace
}  // namespace deepinfer
