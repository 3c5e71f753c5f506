// End to end through `deepinfer generate` on the tiny random-weight Qwen3 fixture (a byte-level
// tokenizer): whatever the random model prefers, every constrained output must validate against
// its schema with an independent validator (ajv, run by ajv_validate.cjs).
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <unistd.h>

#include "node_oracle.h"
#include "run_cli.h"
#include "text_model_dir.h"

namespace deepinfer::grammar {
namespace {

using Json = nlohmann::ordered_json;
namespace fs = std::filesystem;

std::string shell_quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) {
    if (c == '\'') out += "'\\''";
    else out += c;
  }
  return out + "'";
}

using testing::read_file;

// ajv's verdict for each (schema, instances) pair.
Json validate_with_ajv(const Json& request) { return testing::run_node_oracle("ajv_validate.cjs", request); }

// Finite languages (bounded strings and arrays, no recursion), so the random model always
// completes the value within the fixture's 256-token context.
const char* kSchemas[] = {
    R"({"type":"object","properties":{"id":{"type":"integer","minimum":-20,"maximum":300},"name":{"type":"string","minLength":1,"maxLength":6},"ok":{"type":"boolean"}},"required":["id","name"]})",
    R"({"type":"array","items":{"enum":["red","green",3,null]},"minItems":1,"maxItems":4})",
    R"({"type":"object","properties":{"when":{"type":"string","format":"date"},"uid":{"type":"string","format":"uuid"},"code":{"type":"string","pattern":"^[A-Z]{2}-\\d{3}$"}},"required":["when","uid","code"]})",
    R"({"$defs":{"pt":{"type":"object","properties":{"x":{"type":"integer","minimum":0,"maximum":9},"y":{"type":"integer","minimum":0,"maximum":9}},"required":["x","y"]}},"type":"object","properties":{"a":{"$ref":"#/$defs/pt"},"b":{"anyOf":[{"$ref":"#/$defs/pt"},{"type":"null"}]}},"required":["a","b"]})",
};

TEST(EndToEnd, RandomModelOutputsValidateAgainstTheirSchemas) {
  testing::TextModelDir model;
  Json request = Json::array();
  for (const char* schema : kSchemas) {
    Json item = {{"schema", Json::parse(schema)}, {"instances", Json::array()}};
    for (int seed = 1; seed <= 3; ++seed) {
      const auto result = testing::run_cli("generate --model " + model.path() + " --prompt 'json please' --max-tokens 240" +
                                               " --temperature 1 --seed " + std::to_string(seed) + " --json-schema " +
                                               shell_quote(schema),
                                           false);
      ASSERT_EQ(result.exit_code, 0) << result.out;
      item["instances"].push_back(result.out);
    }
    request.push_back(item);
  }
  const Json verdicts = validate_with_ajv(request);
  ASSERT_TRUE(verdicts.is_array());
  for (size_t i = 0; i < request.size(); ++i) {
    for (size_t k = 0; k < request[i]["instances"].size(); ++k) {
      EXPECT_EQ(verdicts[i][k], Json(true)) << kSchemas[i] << "\noutput: " << request[i]["instances"][k];
    }
  }
}

TEST(EndToEnd, BatchRequestFieldsAndPerRequestErrors) {
  testing::TextModelDir model;
  const std::string stem = fs::temp_directory_path().string() + "/deepinfer-e2e-" + std::to_string(getpid());
  {
    std::ofstream in(stem + ".jsonl");
    in << R"({"prompt":"a","max_tokens":60,"response_format":{"type":"json_schema","json_schema":{"name":"f","strict":true,"schema":{"type":"object","properties":{"k":{"type":"boolean"}},"required":["k"]}}}})" << "\n";
    in << R"({"prompt":"b","max_tokens":20,"guided_regex":"[a-c]{2}x\\d"})" << "\n";
    in << R"({"prompt":"c","max_tokens":20,"guided_json":{"type":"array","uniqueItems":true}})" << "\n";
    in << R"({"prompt":"d","max_tokens":20,"guided_choice":["left","right"]})" << "\n";
    in << R"({"prompt":"e","max_tokens":30,"guided_grammar":"root ::= \"(\" [0-9]+ \")\""})" << "\n";
  }
  const auto result = testing::run_cli("generate --model " + model.path() + " --input " + stem + ".jsonl --output " +
                                       stem + "-out.jsonl --temperature 1 --seed 5");
  ASSERT_EQ(result.exit_code, 0) << result.out;
  EXPECT_NE(result.out.find("1 of 5 requests failed"), std::string::npos) << result.out;
  std::vector<Json> lines;
  std::istringstream out(read_file(stem + "-out.jsonl"));
  for (std::string line; std::getline(out, line);) lines.push_back(Json::parse(line));
  fs::remove(stem + ".jsonl");
  fs::remove(stem + "-out.jsonl");
  ASSERT_EQ(lines.size(), 5u);
  const Json first = Json::parse(lines[0]["text"].get<std::string>());
  EXPECT_TRUE(first.is_object() && first.size() == 1 && first["k"].is_boolean()) << lines[0];
  EXPECT_EQ(lines[0]["finish_reason"], "stop");
  const std::string regex_out = lines[1]["text"];
  ASSERT_EQ(regex_out.size(), 4u) << regex_out;
  EXPECT_TRUE(regex_out[0] >= 'a' && regex_out[0] <= 'c' && regex_out[2] == 'x' && std::isdigit(regex_out[3]));
  // The unsupported keyword fails this request alone, an error line naming the keyword and its
  // pointer rather than an empty output.
  EXPECT_EQ(lines[2].size(), 2u) << lines[2];
  EXPECT_EQ(lines[2]["index"], 2);
  EXPECT_NE(lines[2].value("error", "").find("unsupported keyword 'uniqueItems' at '#/uniqueItems'"), std::string::npos)
      << lines[2];
  EXPECT_TRUE(lines[3]["text"] == "left" || lines[3]["text"] == "right") << lines[3];
  const std::string parens = lines[4]["text"];
  EXPECT_TRUE(parens.size() >= 3 && parens.front() == '(') << parens;
}

TEST(EndToEnd, CliRejectsBadSchemasBeforeLoading) {
  testing::TextModelDir model;
  const auto result = testing::run_cli("generate --model " + model.path() + " --prompt x --json-schema '{\"if\":{},\"then\":{}}'");
  EXPECT_NE(result.exit_code, 0);
  EXPECT_NE(result.out.find("unsupported keyword 'if' at '#/if'"), std::string::npos) << result.out;
}

}  // namespace
}  // namespace deepinfer::grammar
