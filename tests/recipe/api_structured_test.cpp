// Structured output at request time. Forced tool calls (tool_choice "required" / a named function)
// on Qwen3: walk the constraining grammar with random tokens of the real Qwen3 vocabulary, parse
// the text with the Qwen3 output parser, check the arguments with ajv. Lenient-mode warnings:
// from the request to each API's body and last stream frame.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <unistd.h>

#include "engine/structured_output.h"
#include "grammar/matcher.h"
#include "api_test_model.h"
#include "oracle.h"
#include "recipe/api.h"
#include "recipe/output_parser.h"

namespace deepinfer::test {
namespace {

using Json = nlohmann::ordered_json;
namespace fs = std::filesystem;


// Finite argument languages (bounded strings, arrays and ranges), so a random walk ends.
const Json kTools = Json::parse(R"([
  {"type": "function", "function": {"name": "get_weather", "strict": true, "parameters": {"type": "object",
    "properties": {"city": {"type": "string", "minLength": 1, "maxLength": 8},
                   "unit": {"enum": ["c", "f"]}, "days": {"type": "integer", "minimum": 1, "maximum": 14}},
    "required": ["city", "unit", "days"], "additionalProperties": false}}},
  {"type": "function", "function": {"name": "add_tags", "parameters": {"type": "object",
    "properties": {"tags": {"type": "array", "items": {"type": "string", "pattern": "^[a-z]{1,4}$"},
                            "minItems": 1, "maxItems": 3}, "pin": {"type": "boolean"}},
    "required": ["tags", "pin"], "additionalProperties": false}}}])");

Json chat_body(const Json& tool_choice) {
  return Json{{"model", "tiny"},
              {"messages", {{{"role", "user"}, {"content", "Weather in Paris, and tag it."}}}},
              {"tools", kTools},
              {"tool_choice", tool_choice}};
}

ApiRequest parse_ok(ApiKind kind, const Json& body) {
  auto result = parse_api_request(kind, body, qwen3(8192));
  if (auto* e = std::get_if<ApiError>(&result)) {
    ADD_FAILURE() << e->param << ": " << e->message;
    return {};
  }
  return std::get<ApiRequest>(std::move(result));
}

std::shared_ptr<grammar::CompiledGrammar> compile(const StructuredOutputParams& params) {
  static const auto vocab = std::make_shared<const grammar::TokenVocab>(
      value_or_throw(grammar::TokenVocab::from_tokenizer(qwen3_tokenizer())));
  auto built = grammar::build_grammar(to_grammar_spec(params));
  EXPECT_TRUE(built.ok()) << built.error().message;
  return value_or_throw(grammar::compile_grammar(std::move(*built), vocab));
}

// Uniformly random allowed non-stop tokens until the grammar must end: the text a model with
// arbitrary weights could produce under the mask.
std::string random_walk(const std::shared_ptr<grammar::CompiledGrammar>& compiled, uint32_t seed) {
  grammar::GrammarMatcher matcher(compiled);
  const grammar::TokenVocab& vocab = compiled->vocab();
  std::vector<uint32_t> mask(vocab.num_mask_words());
  std::mt19937 rng(seed);
  std::string text;
  for (int step = 0; step < 2000 && !matcher.must_end(); ++step) {
    EXPECT_TRUE(matcher.fill_next_token_bitmask(mask.data()));
    std::vector<int32_t> allowed;
    for (int32_t id = 0; id < vocab.num_tokens(); ++id) {
      if ((mask[id / 32] >> (id % 32)) & 1 && !vocab.is_stop(id)) allowed.push_back(id);
    }
    if (allowed.empty()) break;
    const int32_t token = allowed[rng() % allowed.size()];
    EXPECT_TRUE(matcher.accept_token(token));
    text += vocab.token_bytes(token);
  }
  EXPECT_TRUE(matcher.can_end()) << text;
  return text;
}

struct Call {
  std::string name;
  std::string arguments;
};

std::vector<Call> parse_calls(const ApiRequest& request, const std::string& text) {
  auto parser = OutputParser::create(ChatFamily::kQwen3, request.parsing);
  std::vector<OutputEvent> events = parser->push(text);
  for (OutputEvent& e : parser->finish()) events.push_back(std::move(e));
  std::vector<Call> calls;
  for (const OutputEvent& e : events) {
    if (e.kind == OutputEventKind::kToolCallBegin) calls.push_back({e.name, ""});
    if (e.kind == OutputEventKind::kToolCallArguments) calls.back().arguments += e.text;
    EXPECT_NE(e.kind, OutputEventKind::kText) << "text outside the call: " << e.text;
  }
  return calls;
}

// ajv's verdicts: [{"schema", "instances": [json text]}] -> [[true|false|"parse error"]].
Json validate_with_ajv(const Json& request) {
  const std::string stem = fs::temp_directory_path().string() + "/deepinfer-tools-" + std::to_string(getpid());
  std::ofstream(stem + "-request.json") << request.dump();
  const std::string command = "node '" + recipe_test_path("../grammar/ajv_validate.cjs") + "' '" + stem +
                              "-request.json' '" + stem + "-answer.json'";
  const int status = std::system(command.c_str());
  fs::remove(stem + "-request.json");
  EXPECT_EQ(status, 0) << command;
  std::stringstream answer;
  answer << std::ifstream(stem + "-answer.json").rdbuf();
  fs::remove(stem + "-answer.json");
  return Json::parse(answer.str());
}

TEST(ToolConstraint, RequiredCallsParseAndValidate) {
  const ApiRequest request = parse_ok(ApiKind::kChatCompletions, chat_body("required"));
  ASSERT_TRUE(request.sampling.structured_output.has_value());
  EXPECT_TRUE(request.sampling.structured_output->strict);  // get_weather is strict
  const auto compiled = compile(*request.sampling.structured_output);
  Json ajv_request = Json::array();
  std::map<std::string, int> calls_per_tool;
  for (const Json& tool : kTools) {
    ajv_request.push_back({{"schema", tool["function"]["parameters"]}, {"instances", Json::array()}});
  }
  for (uint32_t seed = 0; seed < 12; ++seed) {
    const std::string text = random_walk(compiled, seed);
    const std::vector<Call> calls = parse_calls(request, text);
    ASSERT_EQ(calls.size(), 1u) << text;
    const int index = calls[0].name == "get_weather" ? 0 : calls[0].name == "add_tags" ? 1 : -1;
    ASSERT_GE(index, 0) << text;
    ++calls_per_tool[calls[0].name];
    ajv_request[index]["instances"].push_back(calls[0].arguments);
  }
  EXPECT_EQ(calls_per_tool.size(), 2u) << "12 random walks should reach both tools";
  const Json verdicts = validate_with_ajv(ajv_request);
  for (size_t t = 0; t < verdicts.size(); ++t) {
    for (size_t i = 0; i < verdicts[t].size(); ++i) {
      EXPECT_EQ(verdicts[t][i], true) << ajv_request[t]["instances"][i];
    }
  }
}

TEST(ToolConstraint, NamedFunctionAllowsOnlyThatTool) {
  const ApiRequest request = parse_ok(ApiKind::kChatCompletions,
                                      chat_body({{"type", "function"}, {"function", {{"name", "add_tags"}}}}));
  ASSERT_TRUE(request.sampling.structured_output.has_value());
  EXPECT_FALSE(request.sampling.structured_output->strict);  // add_tags is not strict
  const auto compiled = compile(*request.sampling.structured_output);
  grammar::GrammarMatcher good(compiled);
  EXPECT_TRUE(good.accept_bytes(
      "<tool_call>\n{\"name\": \"add_tags\", \"arguments\": {\"tags\": [\"ab\"], \"pin\": true}}\n</tool_call>"));
  EXPECT_TRUE(good.must_end());
  for (const char* bad : {"<tool_call>\n{\"name\": \"get_weather\"",
                          "<tool_call>\n{\"name\": \"add_tags\", \"arguments\": {\"tags\": [\"ABC\"]",
                          "<tool_call>\n{\"name\": \"add_tags\", \"arguments\": {\"pin\"", "Sure: <tool_call>"}) {
    grammar::GrammarMatcher matcher(compiled);
    EXPECT_FALSE(matcher.accept_bytes(bad)) << bad;
  }
  // The Responses API's named function reaches the same constraint.
  Json responses = {{"model", "tiny"},
                    {"input", "Tag it."},
                    {"tool_choice", {{"type", "function"}, {"name", "add_tags"}}},
                    {"tools", Json::array()}};
  for (const Json& tool : kTools) {
    Json flat = tool["function"];
    flat["type"] = "function";
    responses["tools"].push_back(flat);
  }
  const ApiRequest from_responses = parse_ok(ApiKind::kResponses, responses);
  ASSERT_TRUE(from_responses.sampling.structured_output.has_value());
  EXPECT_EQ(from_responses.sampling.structured_output->spec, request.sampling.structured_output->spec);
}

TEST(ToolConstraint, AutoIsUnconstrainedAndConflictsAreErrors) {
  EXPECT_FALSE(parse_ok(ApiKind::kChatCompletions, chat_body("auto")).sampling.structured_output.has_value());
  Json body = chat_body("required");
  body["response_format"] = {{"type", "json_object"}};
  auto result = parse_api_request(ApiKind::kChatCompletions, body, qwen3(8192));
  ASSERT_TRUE(std::holds_alternative<ApiError>(result));
  EXPECT_EQ(std::get<ApiError>(result).param, "tool_choice");
  body = chat_body("required");
  body["tools"][0]["function"]["parameters"]["properties"]["city"]["not"] = {{"type", "null"}};
  result = parse_api_request(ApiKind::kChatCompletions, body, qwen3(8192));
  ASSERT_TRUE(std::holds_alternative<ApiError>(result)) << "a strict tool with an unenforceable keyword";
  EXPECT_EQ(std::get<ApiError>(result).param, "tools");
}

// A schema with a keyword the engine cannot enforce ('uniqueItems').
const Json kLenientSchema = Json::parse(R"({"type": "object", "properties": {"a": {"type": "array",
    "items": {"type": "integer"}, "uniqueItems": true}}, "required": ["a"]})");
const Json kLenientFormat = {{"type", "json_schema"}, {"json_schema", {{"name", "r"}, {"schema", kLenientSchema}}}};

RequestOutput finished_step(const std::string& text) {
  RequestOutput out;
  out.request_id = 1;
  out.num_prompt_tokens = 5;
  SampleOutput s;
  s.new_token_ids = *qwen3_tokenizer().encode(text);
  s.new_text = text;
  s.finished = true;
  s.finish_reason = FinishReason::kStop;
  out.samples.push_back(std::move(s));
  out.finished = true;
  return out;
}

// The JSON of the last data frame before any "data: [DONE]".
Json last_event_data(const std::vector<std::string>& frames) {
  for (auto it = frames.rbegin(); it != frames.rend(); ++it) {
    if (*it == "data: [DONE]\n\n") continue;
    const size_t at = it->find("data: ");
    return Json::parse(it->substr(at + 6));
  }
  return nullptr;
}

TEST(LenientWarnings, ReachEveryApiBodyAndTheLastStreamFrame) {
  const Json chat = {{"model", "tiny"}, {"messages", {{{"role", "user"}, {"content", "x"}}}},
                     {"response_format", kLenientFormat}, {"structured_outputs_lenient", true}};
  const Json responses = {{"model", "tiny"}, {"input", "x"}, {"structured_outputs_lenient", true},
                          {"text", {{"format", {{"type", "json_schema"}, {"name", "r"}, {"schema", kLenientSchema}}}}}};
  const Json completions = {{"model", "tiny"}, {"prompt", "x"}, {"guided_json", kLenientSchema},
                            {"structured_outputs_lenient", true}};
  for (const auto& [kind, body] : {std::pair{ApiKind::kChatCompletions, chat},
                                   std::pair{ApiKind::kResponses, responses},
                                   std::pair{ApiKind::kCompletions, completions}}) {
    const ApiRequest request = parse_ok(kind, body);
    ASSERT_TRUE(request.sampling.structured_output.has_value());
    EXPECT_FALSE(request.sampling.structured_output->strict);
    ASSERT_EQ(request.warnings.size(), 1u);
    EXPECT_NE(request.warnings[0].find("'uniqueItems'"), std::string::npos) << request.warnings[0];
    const Json expected = request.warnings;
    auto builder = ApiResponseBuilder::create(request, qwen3(8192), "id-1", 0);
    builder->on_output(finished_step("{\"a\":[1]}"));
    EXPECT_EQ(builder->final_body()["warnings"], expected);
    ApiRequest streamed = request;
    streamed.stream = true;
    auto stream = ApiResponseBuilder::create(streamed, qwen3(8192), "id-2", 0);
    stream->on_output(finished_step("{\"a\":[1]}"));
    const Json last = last_event_data(stream->finish_stream());
    EXPECT_EQ(kind == ApiKind::kResponses ? last["response"]["warnings"] : last["warnings"], expected) << last.dump();
  }
}

TEST(LenientWarnings, ForcedCallOfANonStrictToolWarnsInMessages) {
  const Json body = {{"model", "tiny"}, {"max_tokens", 64}, {"messages", {{{"role", "user"}, {"content", "x"}}}},
                     {"tools", {{{"name", "f"}, {"input_schema", kLenientSchema}}}},
                     {"tool_choice", {{"type", "tool"}, {"name", "f"}}}};
  ApiRequest request = parse_ok(ApiKind::kMessages, body);
  ASSERT_TRUE(request.sampling.structured_output.has_value());
  ASSERT_EQ(request.warnings.size(), 1u);
  EXPECT_NE(request.warnings[0].find("'uniqueItems'"), std::string::npos) << request.warnings[0];
  const std::string call = "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": [1, 1]}}\n</tool_call>";
  grammar::GrammarMatcher matcher(compile(*request.sampling.structured_output));
  EXPECT_TRUE(matcher.accept_bytes(call));  // uniqueItems was dropped, not enforced
  auto builder = ApiResponseBuilder::create(request, qwen3(8192), "msg_1", 0);
  builder->on_output(finished_step(call));
  const Json message = builder->final_body();
  EXPECT_EQ(message["warnings"], Json(request.warnings));
  EXPECT_EQ(message["content"][0]["type"], "tool_use");
  request.stream = true;
  auto stream = ApiResponseBuilder::create(request, qwen3(8192), "msg_2", 0);
  stream->on_output(finished_step(call));
  const std::vector<std::string> frames = stream->finish_stream();
  ASSERT_GE(frames.size(), 2u);
  const std::string& delta = frames[frames.size() - 2];
  ASSERT_TRUE(delta.starts_with("event: message_delta\n")) << delta;
  EXPECT_EQ(Json::parse(delta.substr(delta.find("data: ") + 6))["warnings"], Json(request.warnings));
}

TEST(LenientWarnings, StrictRequestsHaveNoneAndLenientErrorsNameTheField) {
  Json chat = {{"model", "tiny"}, {"messages", {{{"role", "user"}, {"content", "x"}}}},
               {"response_format", kLenientFormat}};
  const ApiRequest strict = parse_ok(ApiKind::kChatCompletions, chat);
  EXPECT_TRUE(strict.warnings.empty());
  EXPECT_FALSE(ApiResponseBuilder::create(strict, qwen3(8192), "id", 0)->final_body().contains("warnings"));
  chat["structured_outputs_lenient"] = "yes";
  auto result = parse_api_request(ApiKind::kChatCompletions, chat, qwen3(8192));
  ASSERT_TRUE(std::holds_alternative<ApiError>(result));
  EXPECT_EQ(std::get<ApiError>(result).param, "structured_outputs_lenient");
  chat["structured_outputs_lenient"] = true;
  chat["response_format"]["json_schema"]["schema"] = {{"$ref", "#/nowhere"}};
  result = parse_api_request(ApiKind::kChatCompletions, chat, qwen3(8192));
  ASSERT_TRUE(std::holds_alternative<ApiError>(result));
  EXPECT_EQ(std::get<ApiError>(result).param, "response_format");
}

}  // namespace
}  // namespace deepinfer::test
