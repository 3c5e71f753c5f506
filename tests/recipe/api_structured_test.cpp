// Structured output at request time. Forced tool calls (tool_choice "required" / a named function)
// on Qwen3 through each API (every family's grammar is in tool_call_grammar_test.cpp). Lenient-mode
// warnings: from the request to each API's body and last stream frame.
#include <gtest/gtest.h>

#include "api_test_model.h"
#include "grammar_walk.h"
#include "recipe/api.h"

namespace deepinfer::test {
namespace {

using Json = nlohmann::ordered_json;

Json chat_body(const Json& tool_choice) {
  return Json{{"model", "tiny"},
              {"messages", {{{"role", "user"}, {"content", "Weather in Paris, and tag it."}}}},
              {"tools", kWeatherAndTagTools},
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
  return compile_params(params, qwen3_tokenizer());
}

TEST(ToolConstraint, NamedFunctionAllowsOnlyThatTool) {
  const ApiRequest request = parse_ok(ApiKind::kChatCompletions,
                                      chat_body({{"type", "function"}, {"function", {{"name", "add_tags"}}}}));
  ASSERT_TRUE(request.sampling.structured_output.has_value());
  const auto compiled = compile(*request.sampling.structured_output);
  const std::string good =
      "<tool_call>\n{\"name\": \"add_tags\", \"arguments\": {\"tags\": [\"ab\"], \"pin\": true}}\n</tool_call>";
  EXPECT_TRUE(accepts_text(compiled, qwen3_tokenizer(), good));
  for (const char* bad : {"<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"P\", \"unit\": \"c\", "
                          "\"days\": 1}}\n</tool_call>",
                          "<tool_call>\n{\"name\": \"add_tags\", \"arguments\": {\"tags\": [\"ABC\"], \"pin\": true}}\n</tool_call>",
                          "<tool_call>\n{\"name\": \"add_tags\", \"arguments\": {\"pin\": true}}\n</tool_call>",
                          "Sure: <tool_call>"}) {
    EXPECT_FALSE(accepts_text(compiled, qwen3_tokenizer(), bad)) << bad;
  }
  // The Responses API's named function reaches the same constraint.
  Json responses = {{"model", "tiny"},
                    {"input", "Tag it."},
                    {"tool_choice", {{"type", "function"}, {"name", "add_tags"}}},
                    {"tools", Json::array()}};
  for (const Json& tool : kWeatherAndTagTools) {
    Json flat = tool["function"];
    flat["type"] = "function";
    responses["tools"].push_back(flat);
  }
  const ApiRequest from_responses = parse_ok(ApiKind::kResponses, responses);
  ASSERT_TRUE(from_responses.sampling.structured_output.has_value());
  EXPECT_EQ(from_responses.sampling.structured_output->spec, request.sampling.structured_output->spec);
}

// Gemma 3's and Llama 3's templates show no tools: a required or named call is a 400 naming the
// format, tools merely offered (auto) are accepted and leave the text free.
TEST(ToolConstraint, AFamilyWithoutToolCallsRefusesARequiredCall) {
  for (const ChatFamily family : {ChatFamily::kGemma3, ChatFamily::kLlama3}) {
    ModelContext model = qwen3(8192);
    model.family = family;
    for (const Json& choice : {Json("required"), Json{{"type", "function"}, {"function", {{"name", "add_tags"}}}}}) {
      auto result = parse_api_request(ApiKind::kChatCompletions, chat_body(choice), model);
      const auto* error = std::get_if<ApiError>(&result);
      ASSERT_NE(error, nullptr) << chat_family_name(family) << " " << choice.dump();
      EXPECT_EQ(error->param, "tool_choice");
      EXPECT_EQ(error->message, "tool_choice: the " + std::string(chat_family_name(family)) +
                                    " chat format has no tool calls, so a tool call cannot be required");
    }
    auto offered = parse_api_request(ApiKind::kChatCompletions, chat_body("auto"), model);
    ASSERT_TRUE(std::holds_alternative<ApiRequest>(offered)) << chat_family_name(family);
    EXPECT_FALSE(std::get<ApiRequest>(offered).sampling.structured_output.has_value());
  }
}

TEST(ToolConstraint, ConflictsAreErrors) {
  Json body = chat_body("required");
  body["response_format"] = {{"type", "json_object"}};
  auto result = parse_api_request(ApiKind::kChatCompletions, body, qwen3(8192));
  ASSERT_TRUE(std::holds_alternative<ApiError>(result));
  EXPECT_EQ(std::get<ApiError>(result).param, "tool_choice");
  body = chat_body("required");
  body["tools"][0]["function"]["parameters"]["properties"]["city"] = {{"$ref", "#/nowhere"}};
  result = parse_api_request(ApiKind::kChatCompletions, body, qwen3(8192));
  ASSERT_TRUE(std::holds_alternative<ApiError>(result)) << "a strict tool whose schema cannot compile";
  EXPECT_EQ(std::get<ApiError>(result).param, "tools");
  EXPECT_NE(std::get<ApiError>(result).message.find("tools[0].function.parameters"), std::string::npos);
  // The same schema on a non-strict tool: its arguments are only kept to a JSON object.
  body = chat_body("required");
  body["tools"][1]["function"]["parameters"]["properties"]["pin"] = {{"$ref", "#/nowhere"}};
  const ApiRequest lenient = parse_ok(ApiKind::kChatCompletions, body);
  ASSERT_EQ(lenient.warnings.size(), 1u);
  EXPECT_NE(lenient.warnings[0].find("only constrained to a JSON object"), std::string::npos) << lenient.warnings[0];
  const std::string call = "<tool_call>\n{\"name\": \"add_tags\", \"arguments\": {\"any\": [1]}}\n</tool_call>";
  EXPECT_TRUE(accepts_text(compile(*lenient.sampling.structured_output), qwen3_tokenizer(), call));
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
  // uniqueItems was dropped, not enforced.
  EXPECT_TRUE(accepts_text(compile(*request.sampling.structured_output), qwen3_tokenizer(), call));
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
