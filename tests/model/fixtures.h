// Access to the transformers reference fixtures in tests/data/<name>/ (made by
// tools/reference/make_fixtures.py): expected.json plus the tiny model itself.
#pragma once

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "engine/generator.h"

namespace deepinfer::testing {

inline std::string fixture_dir(const std::string& name) { return std::string(DEEPINFER_TEST_DATA_DIR) + "/" + name; }

inline nlohmann::json load_expected(const std::string& name) {
  std::ifstream in(fixture_dir(name) + "/expected.json");
  return nlohmann::json::parse(in);
}

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

}  // namespace deepinfer::testing
