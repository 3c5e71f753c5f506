// `generate --prompt` and `--chat` end to end: a fixture model given a small byte-level
// tokenizer and Qwen3's own chat template must continue the text exactly as `generate --tokens`
// continues the ids that `tokenize` / `prompt --tokens` give for it.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <string>

#include <nlohmann/json.hpp>

#include "text_model_dir.h"

namespace {

using deepinfer::testing::TextModelDir;

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
