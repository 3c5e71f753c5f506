// Access to the transformers reference fixtures in tests/data/<name>/ (made by
// tools/reference/make_fixtures.py): expected.json plus the tiny model itself.
#pragma once

#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "engine/generator.h"
#include "fixture_dir.h"
#include "sampling/logprobs.h"

namespace deepinfer::testing {

inline nlohmann::json load_expected(const std::string& name) { return fixture_json(name, "expected.json"); }

// Every fixture directory holding its own text model, sorted; the suite checks the required ones are
// among them. (Fixtures of a shipped model under models/ have no config.json here; image-input
// fixtures, with an image.json, expect their image in the prompt and have their own tests.)
inline std::vector<std::string> fixture_names() {
  std::vector<std::string> names;
  for (const auto& entry : std::filesystem::directory_iterator(DEEPINFER_TEST_DATA_DIR)) {
    if (std::filesystem::exists(entry.path() / "expected.json") &&
        std::filesystem::exists(entry.path() / "config.json") &&
        !std::filesystem::exists(entry.path() / "image.json")) {
      names.push_back(entry.path().filename().string());
    }
  }
  std::sort(names.begin(), names.end());
  return names;
}

// The tolerance on logprobs: |got - want| <= 1e-4 + 1e-4 * |want|.
inline bool logprob_close(double got, double want) { return std::abs(got - want) <= 1e-4 + 1e-4 * std::abs(want); }

// Greedy generation from expected["greedy"]'s prompt gives its tokens, up to and including the first
// near-tie (margin < 1e-3), after which the two may legitimately diverge.
inline void expect_greedy_matches(const nlohmann::json& greedy, Generator& generator) {
  GenerateOptions options;
  options.max_tokens = greedy["max_tokens"].get<int32_t>();
  options.sampling.temperature = 0.0;
  options.ignore_eos = true;
  auto got = generator.generate(greedy["prompt"].get<std::vector<int32_t>>(), options);
  ASSERT_TRUE(got.ok()) << got.error().message;
  const auto want = greedy["tokens"].get<std::vector<int32_t>>();
  const auto margins = greedy["margins"].get<std::vector<double>>();
  ASSERT_EQ(got->size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    ASSERT_EQ((*got)[i], want[i]) << "step " << i;
    if (margins[i] < 1e-3) break;
  }
}

// Compares our logits rows against the fixture's per-position top-k lists.
inline void expect_matches_score(const nlohmann::json& score, const std::vector<float>& logits, int64_t vocab) {
  const auto& positions = score["positions"];
  ASSERT_EQ(logits.size(), positions.size() * static_cast<size_t>(vocab));
  for (size_t pos = 0; pos < positions.size(); ++pos) {
    const auto& want_top = positions[pos]["top"];
    const auto got_top =
        top_logprobs(logits.data() + pos * static_cast<size_t>(vocab), vocab, static_cast<int32_t>(want_top.size()));
    const std::vector<double> got_all = log_softmax(logits.data() + pos * static_cast<size_t>(vocab), vocab);
    for (size_t i = 0; i < want_top.size(); ++i) {
      const int32_t want_id = want_top[i][0].get<int32_t>();
      const double want_lp = want_top[i][1].get<double>();
      // The logprob of the id transformers ranked here must match, wherever we ranked it.
      EXPECT_TRUE(logprob_close(got_all[static_cast<size_t>(want_id)], want_lp))
          << "pos " << pos << " id " << want_id << ": got " << got_all[static_cast<size_t>(want_id)] << " want "
          << want_lp;
      // Ids may differ only by a swap among near-equal values.
      if (got_top[i].first != want_id) {
        EXPECT_NEAR(got_top[i].second, want_lp, 1e-4)
            << "pos " << pos << " rank " << i << ": got id " << got_top[i].first << " want id " << want_id;
      }
    }
  }
}

}  // namespace deepinfer::testing
