// Access to the transformers reference fixtures in tests/data/<name>/ (made by
// tools/reference/make_fixtures.py): expected.json plus the tiny model itself.
#pragma once

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace deepinfer::testing {

inline std::string fixture_dir(const std::string& name) { return std::string(DEEPINFER_TEST_DATA_DIR) + "/" + name; }

inline nlohmann::json load_expected(const std::string& name) {
  std::ifstream in(fixture_dir(name) + "/expected.json");
  return nlohmann::json::parse(in);
}

// Every fixture directory holding its own model, sorted; the suite checks the required ones are
// among them. (Fixtures of a shipped model under models/ have no config.json here.)
inline std::vector<std::string> fixture_names() {
  std::vector<std::string> names;
  for (const auto& entry : std::filesystem::directory_iterator(DEEPINFER_TEST_DATA_DIR)) {
    if (std::filesystem::exists(entry.path() / "expected.json") && std::filesystem::exists(entry.path() / "config.json")) {
      names.push_back(entry.path().filename().string());
    }
  }
  std::sort(names.begin(), names.end());
  return names;
}

// The tolerance on logprobs: |got - want| <= 1e-4 + 1e-4 * |want|.
inline bool logprob_close(double got, double want) { return std::abs(got - want) <= 1e-4 + 1e-4 * std::abs(want); }

}  // namespace deepinfer::testing
