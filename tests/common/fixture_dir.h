// Where a test fixture lives, tests/data/NAME (most written by tools/reference/), and its JSON files.
#pragma once

#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

namespace deepinfer::testing {

inline std::string fixture_dir(const std::string& name) { return std::string(DEEPINFER_TEST_DATA_DIR) + "/" + name; }

// A JSON file of fixture name (expected.json, image.json, two_images.json, ...).
inline nlohmann::json fixture_json(const std::string& name, const std::string& file) {
  std::ifstream in(fixture_dir(name) + "/" + file);
  return nlohmann::json::parse(in);
}

}  // namespace deepinfer::testing
