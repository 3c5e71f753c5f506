// Response builders: engine outputs -> each API's SSE events and bodies. Event names, order and
// fields follow the official SDK types (openai 6.x resources/responses, chat/completions;
// @anthropic-ai/sdk resources/messages), read in tests/node/node_modules.
#include <gtest/gtest.h>

#include "api_test_model.h"
#include "oracle.h"
#include "recipe/api.h"

namespace deepinfer::test {
namespace {

using Json = nlohmann::ordered_json;


ApiRequest request(ApiKind kind, const std::string& body) {
  auto parsed = parse_api_request(kind, Json::parse(body), qwen3());
  if (auto* e = std::get_if<ApiError>(&parsed)) throw UserError(e->message);
  return std::get<ApiRequest>(std::move(parsed));
}

// One engine step of sample `index`: its text as ids of the real tokenizer.
RequestOutput step(const std::string& text, bool finished = false, FinishReason reason = FinishReason::kStop,
                   int32_t index = 0, std::string stop_reason = "") {
  RequestOutput out;
  out.request_id = 1;
  out.num_prompt_tokens = 20;
  out.num_cached_tokens = 16;
  SampleOutput s;
  s.index = index;
  s.new_token_ids = *qwen3_tokenizer().encode(text);
  s.new_text = text;
  s.finished = finished;
  s.finish_reason = finished ? reason : FinishReason::kNone;
  s.stop_reason = std::move(stop_reason);
  out.samples.push_back(std::move(s));
  out.finished = finished;
  return out;
}

struct Frame {
  std::string event;  // "" for unnamed data frames
  Json data;          // null for [DONE]
};

std::vector<Frame> parse_frames(const std::vector<std::string>& frames) {
  std::vector<Frame> parsed;
  for (const std::string& f : frames) {
    EXPECT_TRUE(f.ends_with("\n\n")) << f;
    Frame frame;
    std::string_view rest(f);
    if (rest.starts_with("event: ")) {
      const size_t nl = rest.find('\n');
      frame.event = std::string(rest.substr(7, nl - 7));
      rest.remove_prefix(nl + 1);
    }
    EXPECT_TRUE(rest.starts_with("data: ")) << f;
    rest.remove_prefix(6);
    rest.remove_suffix(2);
    if (rest != "[DONE]") frame.data = Json::parse(rest);
    parsed.push_back(std::move(frame));
  }
  return parsed;
}

std::vector<Frame> run_stream(ApiResponseBuilder& builder, const std::vector<RequestOutput>& outputs) {
  std::vector<std::string> frames;
  for (const RequestOutput& out : outputs) {
    for (std::string& f : builder.on_output(out)) frames.push_back(std::move(f));
  }
  for (std::string& f : builder.finish_stream()) frames.push_back(std::move(f));
  return parse_frames(frames);
}

const std::vector<RequestOutput> kThinkAndCall = {
    step("<think>\nI need "), step("the weather.</think>\n\nChecking"),
    step(".\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": "),
    step("\"Paris\"}}\n</tool_call>", true)};

constexpr const char* kToolsChat = R"({"model": "tiny", "stream": true, "stream_options": {"include_usage": true},
    "messages": [{"role": "user", "content": "Weather?"}],
    "tools": [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]})";

TEST(ApiResponse, ChatStream) {
  auto builder = ApiResponseBuilder::create(request(ApiKind::kChatCompletions, kToolsChat), qwen3(), "chatcmpl-abc", 1700);
  const std::vector<Frame> frames = run_stream(*builder, kThinkAndCall);
  ASSERT_GE(frames.size(), 6u);
  std::string reasoning, content, arguments;
  for (size_t i = 0; i + 2 < frames.size(); ++i) {
    const Json& c = frames[i].data;
    EXPECT_EQ(c["object"], "chat.completion.chunk");
    EXPECT_EQ(c["id"], "chatcmpl-abc");
    EXPECT_EQ(c["model"], "tiny");
    EXPECT_EQ(c["created"], 1700);
    EXPECT_TRUE(c.contains("usage") && c["usage"].is_null());
    const Json& delta = c["choices"][0]["delta"];
    if (i == 0) {
      EXPECT_EQ(delta["role"], "assistant");
      continue;
    }
    if (delta.contains("reasoning_content")) reasoning += delta["reasoning_content"].get<std::string>();
    if (delta.contains("content")) content += delta["content"].get<std::string>();
    if (delta.contains("tool_calls")) {
      const Json& call = delta["tool_calls"][0];
      EXPECT_EQ(call["index"], 0);
      if (call.contains("id")) {
        EXPECT_TRUE(arguments.empty());
        EXPECT_EQ(call["type"], "function");
        EXPECT_EQ(call["function"]["name"], "get_weather");
        EXPECT_EQ(call["id"], "call_abc_0_0");
      }
      arguments += call["function"]["arguments"].get<std::string>();
    }
  }
  EXPECT_EQ(reasoning, "I need the weather.");
  EXPECT_EQ(content, "Checking.");
  EXPECT_EQ(arguments, "{\"city\": \"Paris\"}");
  const Json& finish = frames[frames.size() - 3].data;
  EXPECT_EQ(finish["choices"][0]["finish_reason"], "tool_calls");
  const Json& usage = frames[frames.size() - 2].data;
  EXPECT_TRUE(usage["choices"].empty());
  EXPECT_EQ(usage["usage"]["prompt_tokens"], 20);
  EXPECT_EQ(usage["usage"]["prompt_tokens_details"]["cached_tokens"], 16);
  size_t num_tokens = 0;
  for (const RequestOutput& o : kThinkAndCall) num_tokens += o.samples[0].new_token_ids.size();
  EXPECT_EQ(usage["usage"]["completion_tokens"], num_tokens);
  EXPECT_EQ(usage["usage"]["total_tokens"], num_tokens + 20);
  EXPECT_TRUE(frames.back().data.is_null());  // data: [DONE]

  const Json body = builder->final_body();
  EXPECT_EQ(body["object"], "chat.completion");
  const Json& message = body["choices"][0]["message"];
  EXPECT_EQ(message["content"], "Checking.");
  EXPECT_EQ(message["reasoning_content"], "I need the weather.");
  EXPECT_EQ(message["tool_calls"][0]["function"]["arguments"], arguments);
  EXPECT_EQ(body["choices"][0]["finish_reason"], "tool_calls");
}

TEST(ApiResponse, ChatChoicesLengthAndLogprobs) {
  auto r = request(ApiKind::kChatCompletions, R"({"model": "tiny", "n": 2, "logprobs": true, "top_logprobs": 1,
      "chat_template_kwargs": {"enable_thinking": false}, "messages": [{"role": "user", "content": "Hi"}]})");
  auto builder = ApiResponseBuilder::create(r, qwen3(), "chatcmpl-x", 1);
  RequestOutput a = step("Hello", true, FinishReason::kLength, 1);
  a.samples[0].new_logprobs = {TokenLogprob{a.samples[0].new_token_ids[0], -0.5, {{a.samples[0].new_token_ids[0], -0.5}}}};
  RequestOutput b = step("Hey", true, FinishReason::kStop, 0);
  b.samples[0].new_logprobs = {TokenLogprob{b.samples[0].new_token_ids[0], -0.25, {{b.samples[0].new_token_ids[0], -0.25}}}};
  builder->on_output(a);
  builder->on_output(b);
  const Json body = builder->final_body();
  ASSERT_EQ(body["choices"].size(), 2u);
  EXPECT_EQ(body["choices"][0]["message"]["content"], "Hey");
  EXPECT_EQ(body["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(body["choices"][1]["message"]["content"], "Hello");
  EXPECT_EQ(body["choices"][1]["finish_reason"], "length");
  const Json& lp = body["choices"][1]["logprobs"]["content"][0];
  EXPECT_EQ(lp["token"], "Hello");
  EXPECT_EQ(lp["logprob"], -0.5);
  EXPECT_EQ(lp["bytes"], Json::array({72, 101, 108, 108, 111}));
  EXPECT_EQ(lp["top_logprobs"][0]["token"], "Hello");
  EXPECT_FALSE(body["choices"][0]["message"].contains("reasoning_content"));
}

TEST(ApiResponse, LogprobsOfPartialCharactersAreValidJson) {
  auto r = request(ApiKind::kChatCompletions, R"({"model": "tiny", "logprobs": true,
      "messages": [{"role": "user", "content": "Hi"}]})");
  auto builder = ApiResponseBuilder::create(r, qwen3(), "chatcmpl-x", 1);
  RequestOutput out = step("𐍈𐌰𐌸 ok", true);
  for (const int32_t id : out.samples[0].new_token_ids) out.samples[0].new_logprobs.push_back(TokenLogprob{id, -1.0, {}});
  builder->on_output(out);
  const Json body = builder->final_body();
  EXPECT_NO_THROW(body.dump());  // strict UTF-8
  int num_partial = 0;  // tokens holding part of a character, shown as U+FFFD
  for (const Json& entry : body["choices"][0]["logprobs"]["content"]) num_partial += entry["token"] == "\uFFFD";
  EXPECT_GT(num_partial, 0);
}

TEST(ApiResponse, CompletionsEchoAndLogprobs) {
  auto r = request(ApiKind::kCompletions, R"({"model": "tiny", "prompt": "Hi", "echo": true, "logprobs": 1})");
  auto builder = ApiResponseBuilder::create(r, qwen3(), "cmpl-1", 1);
  RequestOutput out = step(" there", true);
  out.prompt_logprobs = std::vector<std::optional<TokenLogprob>>(r.prompt_token_ids.size());
  for (size_t i = 0; i < out.samples[0].new_token_ids.size(); ++i) {
    out.samples[0].new_logprobs.push_back(TokenLogprob{out.samples[0].new_token_ids[i], -1.0, {}});
  }
  builder->on_output(out);
  const Json body = builder->final_body();
  EXPECT_EQ(body["object"], "text_completion");
  const Json& choice = body["choices"][0];
  EXPECT_EQ(choice["text"], "Hi there");
  const Json& lp = choice["logprobs"];
  ASSERT_EQ(lp["tokens"].size(), r.prompt_token_ids.size() + out.samples[0].new_token_ids.size());
  EXPECT_TRUE(lp["token_logprobs"][0].is_null());  // nothing precedes the first prompt token
  std::string joined;
  for (size_t i = 0; i < lp["tokens"].size(); ++i) {
    EXPECT_EQ(lp["text_offset"][i], joined.size());
    joined += lp["tokens"][i].get<std::string>();
  }
  EXPECT_EQ(joined, "Hi there");
}

TEST(ApiResponse, ResponsesStream) {
  auto r = request(ApiKind::kResponses, R"({"model": "tiny", "stream": true, "input": "Weather?", "instructions": "Be brief.",
      "tools": [{"type": "function", "name": "get_weather", "parameters": {"type": "object"}}]})");
  auto builder = ApiResponseBuilder::create(r, qwen3(), "resp_abc", 1700);
  const std::vector<Frame> frames = run_stream(*builder, kThinkAndCall);
  std::vector<std::string> order;
  for (size_t i = 0; i < frames.size(); ++i) {
    EXPECT_EQ(frames[i].event, frames[i].data["type"]);
    EXPECT_EQ(frames[i].data["sequence_number"], i);
    if (order.empty() || order.back() != frames[i].event) order.push_back(frames[i].event);
  }
  const std::vector<std::string> expected = {
      "response.created", "response.in_progress", "response.output_item.added", "response.content_part.added",
      "response.reasoning_text.delta", "response.reasoning_text.done", "response.content_part.done",
      "response.output_item.done", "response.output_item.added", "response.content_part.added",
      "response.output_text.delta", "response.output_text.done", "response.content_part.done",
      "response.output_item.done", "response.output_item.added", "response.function_call_arguments.delta",
      "response.function_call_arguments.done", "response.output_item.done", "response.completed"};
  EXPECT_EQ(order, expected);
  const Json& done = frames.back().data["response"];
  EXPECT_EQ(done["status"], "completed");
  EXPECT_EQ(done["instructions"], "Be brief.");
  ASSERT_EQ(done["output"].size(), 3u);
  EXPECT_EQ(done["output"][0]["type"], "reasoning");
  EXPECT_EQ(done["output"][0]["content"][0]["text"], "I need the weather.");
  EXPECT_EQ(done["output"][1]["content"][0]["text"], "Checking.");
  EXPECT_EQ(done["output"][2]["type"], "function_call");
  EXPECT_EQ(done["output"][2]["arguments"], "{\"city\": \"Paris\"}");
  EXPECT_EQ(done["output"][2]["name"], "get_weather");
  EXPECT_EQ(done["usage"]["input_tokens"], 20);
  EXPECT_EQ(done["usage"]["input_tokens_details"]["cached_tokens"], 16);
  EXPECT_EQ(builder->final_body()["output"], done["output"]);
  const Json created = frames[0].data["response"];
  EXPECT_EQ(created["status"], "in_progress");
  EXPECT_TRUE(created["output"].empty());
}

TEST(ApiResponse, ResponsesLengthIsIncomplete) {
  auto r = request(ApiKind::kResponses, R"({"model": "tiny", "input": "Hi", "reasoning": {"effort": "none"}})");
  auto builder = ApiResponseBuilder::create(r, qwen3(), "resp_1", 1);
  const std::vector<Frame> frames = run_stream(*builder, {step("Hello", true, FinishReason::kLength)});
  EXPECT_EQ(frames.back().event, "response.incomplete");
  EXPECT_EQ(frames.back().data["response"]["incomplete_details"]["reason"], "max_output_tokens");
}

TEST(ApiResponse, MessagesStream) {
  auto r = request(ApiKind::kMessages, R"({"model": "tiny", "max_tokens": 100, "stream": true,
      "messages": [{"role": "user", "content": "Weather?"}],
      "tools": [{"name": "get_weather", "input_schema": {"type": "object"}}]})");
  auto builder = ApiResponseBuilder::create(r, qwen3(), "msg_abc", 1);
  const std::vector<Frame> frames = run_stream(*builder, kThinkAndCall);
  std::vector<std::string> order;
  for (const Frame& f : frames) {
    EXPECT_EQ(f.event, f.data["type"]);
    std::string name = f.event;
    if (f.event == "content_block_start") name.append(":").append(f.data["content_block"]["type"].get<std::string>());
    if (f.event == "content_block_delta") name.append(":").append(f.data["delta"]["type"].get<std::string>());
    if (order.empty() || order.back() != name) order.push_back(name);
  }
  const std::vector<std::string> expected = {
      "message_start", "ping", "content_block_start:thinking", "content_block_delta:thinking_delta",
      "content_block_delta:signature_delta", "content_block_stop", "content_block_start:text",
      "content_block_delta:text_delta", "content_block_stop", "content_block_start:tool_use",
      "content_block_delta:input_json_delta", "content_block_stop", "message_delta", "message_stop"};
  EXPECT_EQ(order, expected);
  EXPECT_EQ(frames[0].data["message"]["usage"]["input_tokens"], 4);  // 20 prompt - 16 cached
  EXPECT_EQ(frames[0].data["message"]["usage"]["cache_read_input_tokens"], 16);
  const Json& delta = frames[frames.size() - 2].data;
  EXPECT_EQ(delta["delta"]["stop_reason"], "tool_use");
  const Json body = builder->final_body();
  ASSERT_EQ(body["content"].size(), 3u);
  EXPECT_EQ(body["content"][0]["thinking"], "I need the weather.");
  EXPECT_EQ(body["content"][1]["text"], "Checking.");
  EXPECT_EQ(body["content"][2]["input"], Json::parse(R"({"city": "Paris"})"));
  EXPECT_EQ(body["content"][2]["id"], "toolu_abc_0_0");
  EXPECT_EQ(body["stop_reason"], "tool_use");
  EXPECT_EQ(body["usage"]["output_tokens"], delta["usage"]["output_tokens"]);
  for (size_t i = 2; i < frames.size() - 2; ++i) {
    if (frames[i].data.contains("index")) {
      EXPECT_LE(frames[i].data["index"], 2);
    }
  }
}

TEST(ApiResponse, MessagesStopSequenceAndMaxTokens) {
  auto r = request(ApiKind::kMessages, R"({"model": "tiny", "max_tokens": 10, "stop_sequences": ["END"],
      "thinking": {"type": "disabled"}, "messages": [{"role": "user", "content": "Hi"}]})");
  auto builder = ApiResponseBuilder::create(r, qwen3(), "msg_1", 1);
  builder->on_output(step("Hello", true, FinishReason::kStop, 0, "END"));
  Json body = builder->final_body();
  EXPECT_EQ(body["stop_reason"], "stop_sequence");
  EXPECT_EQ(body["stop_sequence"], "END");
  EXPECT_EQ(body["content"], Json::parse(R"([{"type": "text", "text": "Hello"}])"));
  auto cut = ApiResponseBuilder::create(r, qwen3(), "msg_2", 1);
  cut->on_output(step("Hel", true, FinishReason::kLength));
  EXPECT_EQ(cut->final_body()["stop_reason"], "max_tokens");
}

// Speculative decoding's counts reach each API's usage as an extension object, summed over the
// samples; without drafts the usage is the official shape alone.
TEST(ApiResponse, SpeculativeUsage) {
  const std::pair<ApiKind, const char*> apis[] = {
      {ApiKind::kChatCompletions, R"({"model": "tiny", "n": 2, "messages": [{"role": "user", "content": "Hi"}]})"},
      {ApiKind::kCompletions, R"({"model": "tiny", "prompt": "Hi"})"},
      {ApiKind::kResponses, R"({"model": "tiny", "input": "Hi", "reasoning": {"effort": "none"}})"},
      {ApiKind::kMessages,
       R"({"model": "tiny", "max_tokens": 10, "thinking": {"type": "disabled"}, "messages": [{"role": "user", "content": "Hi"}]})"}};
  for (const auto& [kind, body] : apis) {
    const ApiRequest r = request(kind, body);
    auto plain = ApiResponseBuilder::create(r, qwen3(), "id_1", 1);
    auto drafted = ApiResponseBuilder::create(r, qwen3(), "id_2", 1);
    plain->on_output(step("Hello", true));
    RequestOutput first = step("Hel");
    first.samples[0].num_draft_tokens = 3;  // counts so far, as the engine reports them
    first.samples[0].num_accepted_draft_tokens = 2;
    RequestOutput last = step("lo", true);
    last.samples[0].num_draft_tokens = 5;
    last.samples[0].num_accepted_draft_tokens = 3;
    drafted->on_output(first);
    drafted->on_output(last);
    const int32_t samples = kind == ApiKind::kChatCompletions ? 2 : 1;
    if (samples == 2) {
      RequestOutput other = step("Hi", true, FinishReason::kStop, 1);
      other.samples[0].num_draft_tokens = 4;
      other.samples[0].num_accepted_draft_tokens = 4;
      drafted->on_output(other);
      plain->on_output(step("Hi", true, FinishReason::kStop, 1));
    }
    const Json usage = drafted->final_body()["usage"];
    EXPECT_EQ(usage["speculative"]["draft_tokens"], samples == 2 ? 9 : 5) << body;
    EXPECT_EQ(usage["speculative"]["accepted_draft_tokens"], samples == 2 ? 7 : 3) << body;
    EXPECT_FALSE(plain->final_body()["usage"].contains("speculative")) << body;
  }
}

TEST(ApiResponse, StreamErrors) {
  const ApiError error = api_error(ApiKind::kMessages, 529, "Overloaded");
  auto messages = ApiResponseBuilder::create(
      request(ApiKind::kMessages, R"({"model": "tiny", "max_tokens": 5, "messages": [{"role": "user", "content": "x"}]})"),
      qwen3(), "msg_1", 1);
  const Frame m = parse_frames({messages->stream_error(error)})[0];
  EXPECT_EQ(m.event, "error");
  EXPECT_EQ(m.data, Json::parse(R"({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}})"));
  auto chat = ApiResponseBuilder::create(
      request(ApiKind::kChatCompletions, R"({"model": "tiny", "messages": [{"role": "user", "content": "x"}]})"), qwen3(),
      "chatcmpl-1", 1);
  const Frame c = parse_frames({chat->stream_error(api_error(ApiKind::kChatCompletions, 500, "boom"))})[0];
  EXPECT_EQ(c.data["error"]["message"], "boom");
  auto responses = ApiResponseBuilder::create(request(ApiKind::kResponses, R"({"model": "tiny", "input": "x"})"), qwen3(),
                                              "resp_1", 1);
  const Frame r = parse_frames({responses->stream_error(api_error(ApiKind::kResponses, 500, "boom"))})[0];
  EXPECT_EQ(r.event, "error");
  EXPECT_EQ(r.data["message"], "boom");
  EXPECT_EQ(r.data["sequence_number"], 0);
}

}  // namespace
}  // namespace deepinfer::test
