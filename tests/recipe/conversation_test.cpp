// Parsing OpenAI conversations and template variables: what is normalised, what is refused and
// how the error names the field.
#include "recipe/conversation.h"

#include <gtest/gtest.h>

#include "recipe/chat_template.h"

namespace deepinfer {
namespace {

using Json = nlohmann::ordered_json;

Result<Conversation> parse(const char* json) { return parse_conversation(Json::parse(json)); }

std::string error_of(const char* json) {
  auto result = parse(json);
  return result.ok() ? "(parsed)" : result.error().message;
}

TEST(ParseConversation, NormalisesRolesPartsAndNullToolCalls) {
  auto conversation = parse(R"({"messages": [
      {"role": "developer", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
      {"role": "user", "content": "q"},
      {"role": "assistant", "content": null, "reasoning_content": "r",
       "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{\"x\": 1}"}}]},
      {"role": "tool", "tool_call_id": "c1", "content": "out"},
      {"role": "assistant", "content": "done", "tool_calls": null, "prefix": true}],
    "tools": [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]})");
  ASSERT_TRUE(conversation.ok()) << conversation.error().message;
  const auto& m = conversation->messages;
  ASSERT_EQ(m.size(), 5u);
  EXPECT_EQ(m[0].role, Role::kSystem);
  EXPECT_EQ(*m[0].content, "a\n\nb");
  EXPECT_FALSE(m[2].content.has_value());
  EXPECT_EQ(*m[2].reasoning_content, "r");
  ASSERT_EQ(m[2].tool_calls.size(), 1u);
  EXPECT_EQ(m[2].tool_calls[0].arguments, "{\"x\": 1}");
  EXPECT_EQ(m[3].tool_call_id, "c1");
  EXPECT_TRUE(m[4].tool_calls.empty());
  EXPECT_TRUE(m[4].prefix);
  ASSERT_EQ(conversation->tools.size(), 1u);
  EXPECT_EQ(conversation->tools[0]["function"]["name"], "f");
}

// Image parts (OpenAI's image_url, Hugging Face's image) keep their place among the text parts and
// stay out of the joined text; the API layer reads their bytes.
TEST(ParseConversation, ImagePartsKeepTheirPlace) {
  auto parsed = parse_conversation(Json::parse(R"({"messages": [{"role": "user", "content": [
      {"type": "text", "text": "a"}, {"type": "image_url", "image_url": {"url": "data:,"}},
      {"type": "text", "text": "b"}, {"type": "image"}]}]})"));
  ASSERT_TRUE(parsed.ok()) << parsed.error().message;
  const Message& m = parsed->messages[0];
  EXPECT_EQ(m.content, "a\n\nb");
  EXPECT_EQ(m.content_parts, (std::vector<std::string>{"a", "", "b", ""}));
  EXPECT_EQ(m.image_parts, (std::vector<size_t>{1, 3}));
}

TEST(ParseConversation, ErrorsNameTheField) {
  EXPECT_EQ(error_of(R"({"messages": []})"), "messages: must not be empty");
  EXPECT_EQ(error_of(R"({"prompt": "x"})"), "messages: expected a list");
  EXPECT_EQ(error_of(R"({"messages": [{"role": "robot", "content": "x"}]})"),
            "messages[0].role: expected system, developer, user, assistant or tool, got 'robot'");
  EXPECT_EQ(error_of(R"({"messages": [{"role": "user", "content": 5}]})"),
            "messages[0].content: expected a string or a list of text parts, got number");
  EXPECT_EQ(error_of(R"({"messages": [{"role": "user"}]})"),
            "messages[0].content: expected a string or a list of text parts");
  EXPECT_EQ(error_of(R"({"messages": [{"role": "user", "content": [{"type": "input_audio", "input_audio": {}}]}]})"),
            "messages[0].content[0].type: only \"text\" parts can be rendered into a prompt");
  EXPECT_EQ(error_of(R"({"messages": [{"role": "assistant", "content": null}]})"),
            "messages[0]: an assistant message needs content or tool_calls");
  EXPECT_EQ(error_of(R"({"messages": [{"role": "assistant", "tool_calls": []}]})"),
            "messages[0].tool_calls: expected a non-empty list (leave it out when there are none)");
  EXPECT_EQ(
      error_of(
          R"({"messages": [{"role": "assistant", "tool_calls": [{"function": {"name": "f", "arguments": {}}}]}]})"),
      "messages[0].tool_calls[0].function.arguments: expected a string, got object");
  EXPECT_EQ(error_of(R"({"messages": [{"role": "assistant", "tool_calls": [{"function": {"arguments": "{}"}}]}]})"),
            "messages[0].tool_calls[0].function.name: missing");
  EXPECT_EQ(error_of(R"({"messages": [{"role": "user", "content": "x"}], "tools": [{"type": "retrieval"}]})"),
            "tools[0].type: only \"function\" tools are supported");
  EXPECT_EQ(error_of(R"({"messages": [{"role": "user", "content": "x"}],
                        "tools": [{"type": "function", "function": {"name": "f", "parameters": "none"}}]})"),
            "tools[0].function.parameters: expected a JSON Schema object, got string");
}

TEST(ParseChatOptions, ReadsBothThinkingSpellingsAndChecksTypes) {
  auto options = parse_chat_options(Json::parse(
      R"({"enable_thinking": false, "reasoning_effort": "high", "date": "2024-02-29", "add_generation_prompt": false,
          "unknown_variable": [1]})"));
  ASSERT_TRUE(options.ok()) << options.error().message;
  EXPECT_EQ(options->thinking, false);
  EXPECT_EQ(options->reasoning_effort, "high");
  EXPECT_FALSE(options->add_generation_prompt);
  EXPECT_EQ(parse_chat_options(Json::parse(R"({"thinking": true})"))->thinking, true);
  EXPECT_EQ(parse_chat_options(Json::parse(R"({"thinking": "yes"})")).error().message,
            "thinking: expected true or false, got string");
  EXPECT_EQ(parse_chat_options(Json::parse(R"({"reasoning_effort": "max"})")).error().message,
            "reasoning_effort: expected low, medium or high, got 'max'");
  EXPECT_EQ(parse_chat_options(Json::parse(R"({"date": "28/06/2025"})")).error().message,
            "date: expected YYYY-MM-DD, got '28/06/2025'");
}

}  // namespace
}  // namespace deepinfer
