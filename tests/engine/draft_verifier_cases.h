// DraftVerifier's checks on the shipped default model (its MTP module and confidence head), run by
// the CPU tests (test_draft_verifier.cpp) and the CUDA ones (tests/cuda/test_cuda_draft_verifier.cpp),
// both in batch-invariant mode: a verify forward of 1 + K rows then computes each row as a one-row
// decode step does (the default kernels of both backends round a many-row product's activations
// to bf16, and a near-tie then flips).
#pragma once

#include <gtest/gtest.h>

#include <numeric>
#include <string>

#include "engine/draft_verifier.h"
#include "engine/generator.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

namespace deepinfer::testing {

inline std::string draft_model_dir() {
  return std::string(DEEPINFER_TEST_DATA_DIR) + "/../../models/deepinfer-tiny-v3";
}

// Output with speculation is plain decoding's (Generator), token for token, at every chain length:
// greedy, and sampled with a seed (temperature 0.8, top_p 0.95); greedy drafts are worth verifying
// (the training run measured greedy acceptance 0.727 on held-out code); the statistics add up.
inline void expect_drafts_keep_output(CausalLM& model) {
  auto tokenizer = Tokenizer::load(draft_model_dir());
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.error().message;
  constexpr int32_t kMaxTokens = 48;
  for (const char* text : {"def fibonacci(n):\n    if n < 2:\n        return n\n",
                           "import os\nimport sys\n\n\nclass Config:\n    def __init__(self, path):\n",
                           "for i in range(10):\n    print("}) {
    const auto encoded = tokenizer->encode(text);
    ASSERT_TRUE(encoded.ok()) << encoded.error().message;
    const std::vector<int32_t>& prompt = *encoded;
    GenerateOptions sampled;
    sampled.max_tokens = kMaxTokens;
    sampled.ignore_eos = true;
    sampled.sampling.temperature = 0.8;
    sampled.sampling.top_p = 0.95;
    sampled.sampling.seed = 7;
    for (int32_t drafts : {1, 3}) {
      Generator plain(model, 16, 256);
      auto want = plain.generate(prompt, sampled);
      ASSERT_TRUE(want.ok()) << want.error().message;
      DraftVerifier verifier(model, 256);
      DraftStats stats;
      auto got = verifier.generate(prompt, sampled, drafts, &stats);
      ASSERT_TRUE(got.ok()) << got.error().message;
      EXPECT_EQ(*got, *want) << "sampled, " << drafts << " drafts, prompt: " << text;
    }
    GenerateOptions options;
    options.max_tokens = kMaxTokens;
    options.ignore_eos = true;
    options.sampling.temperature = 0.0;
    Generator plain(model, 16, 256);
    auto want = plain.generate(prompt, options);
    ASSERT_TRUE(want.ok()) << want.error().message;
    for (int32_t drafts : {1, 2, 4}) {
      DraftVerifier verifier(model, 256);
      DraftStats stats;
      auto got = verifier.generate(prompt, options, drafts, &stats);
      ASSERT_TRUE(got.ok()) << got.error().message;
      EXPECT_EQ(*got, *want) << drafts << " drafts, prompt: " << text;
      // Every round keeps its accepted drafts and one token of the main model's.
      int64_t kept = 0;
      for (size_t a = 0; a < stats.accepted_per_round.size(); ++a) {
        kept += static_cast<int64_t>(a + 1) * stats.accepted_per_round[a];
      }
      EXPECT_EQ(std::accumulate(stats.accepted_per_round.begin(), stats.accepted_per_round.end(), int64_t{0}),
                stats.rounds);
      EXPECT_GE(kept + 1, kMaxTokens) << "the prompt's forward gives the first token";
      const DraftStats::Depth& first = stats.depths.front();
      ASSERT_EQ(first.accepted.size(), static_cast<size_t>(stats.rounds));
      const double acceptance =
          std::accumulate(first.accepted.begin(), first.accepted.end(), 0.0) / static_cast<double>(stats.rounds);
      EXPECT_GT(acceptance, 0.4) << drafts << " drafts, prompt: " << text;
      for (float c : first.confidence) EXPECT_TRUE(c > 0.0f && c < 1.0f);
    }
  }
}

}  // namespace deepinfer::testing
