// Shared by the tests that ask a node script in tests/grammar (ajv_validate.cjs,
// xgrammar_oracle.cjs) for an independent oracle's answer, passed through temporary files.
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <unistd.h>

namespace deepinfer::testing {

inline std::string tests_dir() { return std::string(DEEPINFER_TEST_DATA_DIR) + "/.."; }

inline std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

// Runs `node tests/grammar/<script> request.json answer.json` and returns the answer, or null
// after a test failure that shows the script's stderr (its warnings, or why it could not run).
inline nlohmann::ordered_json run_node_oracle(const std::string& script, const nlohmann::ordered_json& request) {
  namespace fs = std::filesystem;
  const std::string stem = fs::temp_directory_path().string() + "/deepinfer-" + fs::path(script).stem().string() +
                           "-" + std::to_string(getpid());
  std::ofstream(stem + "-request.json", std::ios::binary) << request.dump();
  const std::string command = "node '" + tests_dir() + "/grammar/" + script + "' '" + stem + "-request.json' '" +
                              stem + "-answer.json' 2>'" + stem + "-stderr.txt'";
  const int status = std::system(command.c_str());
  fs::remove(stem + "-request.json");
  const std::string stderr_text = read_file(stem + "-stderr.txt");
  fs::remove(stem + "-stderr.txt");
  if (status != 0) {
    ADD_FAILURE() << script << " failed (status " << status << "): " << command << "\n"
                  << stderr_text << " (is tests/node installed? run tools/install_deps.sh)";
    return nullptr;
  }
  nlohmann::ordered_json answer = nlohmann::ordered_json::parse(read_file(stem + "-answer.json"));
  fs::remove(stem + "-answer.json");
  return answer;
}

}  // namespace deepinfer::testing
