// The streaming output parser per family: the same events whatever the chunking (every 2-way
// byte split at UTF-8 boundaries and one chunk per character), and assistant turns written by
// the family's own renderer (checked against the real templates) parsed back into what was
// rendered.
#include <gtest/gtest.h>

#include "recipe/chat_template.h"
#include "recipe/output_parser.h"
#include "recipe/prompt.h"

namespace deepinfer::test {
namespace {

struct Parsed {
  std::string text;
  std::string reasoning;
  std::vector<std::pair<std::string, std::string>> calls;  // name, arguments
  int num_argument_events = 0;
};

Parsed run(ChatFamily family, const OutputParsing& parsing, const std::vector<std::string_view>& chunks) {
  auto parser = OutputParser::create(family, parsing);
  std::vector<OutputEvent> events;
  for (const std::string_view chunk : chunks) {
    for (OutputEvent& e : parser->push(chunk)) events.push_back(std::move(e));
  }
  for (OutputEvent& e : parser->finish()) events.push_back(std::move(e));
  Parsed p;
  for (const OutputEvent& e : events) {
    switch (e.kind) {
      case OutputEventKind::kText:
        p.text += e.text;
        break;
      case OutputEventKind::kReasoning:
        p.reasoning += e.text;
        break;
      case OutputEventKind::kToolCallBegin:
        EXPECT_EQ(e.tool_index, static_cast<int32_t>(p.calls.size()));
        p.calls.emplace_back(e.name, "");
        break;
      case OutputEventKind::kToolCallArguments:
        EXPECT_EQ(e.tool_index + 1, static_cast<int32_t>(p.calls.size()));
        p.calls.back().second += e.text;
        ++p.num_argument_events;
        break;
    }
  }
  EXPECT_EQ(parser->num_tool_calls(), static_cast<int32_t>(p.calls.size()));
  return p;
}

bool is_char_start(std::string_view s, size_t i) { return i == s.size() || (static_cast<unsigned char>(s[i]) & 0xC0) != 0x80; }

// Parses output whole, split in two at every character boundary, and one character per chunk;
// all must agree with expected. Returns the per-character run.
Parsed expect_parse(ChatFamily family, const OutputParsing& parsing, std::string_view output, const Parsed& expected) {
  const auto check = [&](const Parsed& got, const std::string& how) {
    EXPECT_EQ(got.text, expected.text) << how;
    EXPECT_EQ(got.reasoning, expected.reasoning) << how;
    EXPECT_EQ(got.calls, expected.calls) << how;
  };
  check(run(family, parsing, {output}), "whole");
  for (size_t cut = 1; cut < output.size(); ++cut) {
    if (!is_char_start(output, cut)) continue;
    check(run(family, parsing, {output.substr(0, cut), output.substr(cut)}), "split at " + std::to_string(cut));
  }
  std::vector<std::string_view> chars;
  for (size_t i = 0; i < output.size();) {
    size_t j = i + 1;
    while (!is_char_start(output, j)) ++j;
    chars.push_back(output.substr(i, j - i));
    i = j;
  }
  Parsed per_char = run(family, parsing, chars);
  check(per_char, "per character");
  return per_char;
}

OutputParsing parsing(bool starts_in_reasoning, bool reasoning, bool tools) {
  return OutputParsing{starts_in_reasoning, reasoning, tools};
}

TEST(OutputParser, Qwen3ThinkingThenAnswer) {
  expect_parse(ChatFamily::kQwen3, parsing(false, true, false), "<think>\nLet me think.\n\n</think>\n\nHello!",
               Parsed{"Hello!", "Let me think.", {}, 0});
}

TEST(OutputParser, Qwen3ToolCallArgumentsStreamIncrementally) {
  const std::string out =
      "Checking.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris \\\"Nord\\\"\", \"days\": [1, "
      "{\"x\": \"}\"}]}}\n</tool_call>\n<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call>";
  const Parsed per_char = expect_parse(
      ChatFamily::kQwen3, parsing(false, true, true), out,
      Parsed{"Checking.",
             "",
             {{"get_weather", "{\"city\": \"Paris \\\"Nord\\\"\", \"days\": [1, {\"x\": \"}\"}]}"}, {"f", "{}"}},
             0});
  EXPECT_GT(per_char.num_argument_events, 20);  // one piece per character: streamed, not buffered
}

TEST(OutputParser, Qwen3CallWithArgumentsFirstIsParsedWhole) {
  expect_parse(ChatFamily::kQwen3, parsing(false, true, true),
               "<tool_call>\n{\"arguments\": {\"a\": 1}, \"name\": \"f\"}\n</tool_call>",
               Parsed{"", "", {{"f", "{\"a\":1}"}}, 0});
}

TEST(OutputParser, Qwen3InvalidCallStaysText) {
  expect_parse(ChatFamily::kQwen3, parsing(false, true, true), "<tool_call>\nnot json\n</tool_call>",
               Parsed{"<tool_call>\nnot json\n</tool_call>", "", {}, 0});
}

// A model can emit JSON nested deeper than any document should be: copying or dumping such a tree
// recursed once per level and ran out of stack. Past kMaxJsonNesting the call is not JSON: text.
TEST(OutputParser, CallNestedTooDeepStaysText) {
  const std::string out = "<tool_call>\n{\"arguments\": " + std::string(100'000, '[') + std::string(100'000, ']') +
                          ", \"name\": \"f\"}\n</tool_call>";
  const Parsed got = run(ChatFamily::kQwen3, parsing(false, true, true), {out});
  EXPECT_TRUE(got.calls.empty());
  EXPECT_EQ(got.text, out);
}

TEST(OutputParser, ToolMarkersAreTextWithoutTools) {
  expect_parse(ChatFamily::kQwen3, parsing(false, true, false), "a <tool_call>{}</tool_call>",
               Parsed{"a <tool_call>{}</tool_call>", "", {}, 0});
}

TEST(OutputParser, R1StartsInReasoningAndDropsStrayEndOfThinking) {
  expect_parse(ChatFamily::kDeepSeekR1, parsing(true, true, false), "Hmm, 日本.\n</think>\n\nAnswer</think> done",
               Parsed{"Answer done", "Hmm, 日本.", {}, 0});
}

TEST(OutputParser, DeepSeekV3ToolCalls) {
  expect_parse(ChatFamily::kDeepSeekV3, parsing(false, false, true),
               "Let me check.<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n"
               "{\"city\": \"Paris\"}\n```<｜tool▁call▁end｜>\n<｜tool▁call▁begin｜>function<｜tool▁sep｜>f\n```json\n"
               "{}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
               Parsed{"Let me check.", "", {{"get_weather", "{\"city\": \"Paris\"}"}, {"f", "{}"}}, 0});
}

TEST(OutputParser, DeepSeekV31ToolCallAfterThinking) {
  expect_parse(ChatFamily::kDeepSeekV31, parsing(true, true, true),
               "I should call it.</think><｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>"
               "{\"city\": \"東京\"}<｜tool▁call▁end｜><｜tool▁calls▁end｜>",
               Parsed{"", "I should call it.", {{"get_weather", "{\"city\": \"東京\"}"}}, 0});
}

TEST(OutputParser, Llama31JsonCallOnlyAtTheStart) {
  expect_parse(ChatFamily::kLlama31, parsing(false, false, true),
               " {\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}",
               Parsed{"", "", {{"get_weather", "{\"city\": \"Paris\"}"}}, 0});
  expect_parse(ChatFamily::kLlama31, parsing(false, false, true), "The set {1, 2}.",
               Parsed{"The set {1, 2}.", "", {}, 0});
  expect_parse(ChatFamily::kLlama31, parsing(false, false, true), "{\"answer\": 42}",
               Parsed{"{\"answer\": 42}", "", {}, 0});
}

TEST(OutputParser, GptOssChannels) {
  expect_parse(ChatFamily::kGptOss, parsing(false, true, true),
               "<|channel|>analysis<|message|>Need the weather.<|end|><|start|>assistant<|channel|>commentary "
               "to=functions.get_weather <|constrain|>json<|message|>{\"city\":\"Paris\"}",
               Parsed{"", "Need the weather.", {{"get_weather", "{\"city\":\"Paris\"}"}}, 0});
  expect_parse(ChatFamily::kGptOss, parsing(false, true, false),
               "<|channel|>analysis<|message|>Think.<|end|><|start|>assistant<|channel|>final<|message|>Hi <b>!",
               Parsed{"Hi <b>!", "Think.", {}, 0});
}

// The assistant turn a renderer writes for a message, cut out of the rendered history.
std::string rendered_turn(ChatFamily family, const Message& assistant, std::string_view begin, std::string_view end) {
  Conversation conversation;
  conversation.messages.push_back(Message{Role::kUser, "Weather?", std::nullopt, {}, "", false});
  conversation.messages.push_back(assistant);
  conversation.tools.push_back(nlohmann::ordered_json::parse(
      R"({"type": "function", "function": {"name": "get_weather", "description": "d", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}})"));
  ChatOptions options;
  options.add_generation_prompt = false;
  options.date = "2026-01-01";
  auto segments = render_chat(family, conversation, options);
  EXPECT_TRUE(segments.ok()) << segments.error().message;
  const std::string prompt = prompt_text(*segments);
  const size_t b = prompt.find(begin, prompt.find("Weather?"));
  EXPECT_NE(b, std::string::npos);
  const size_t e = prompt.find(end, b + begin.size());
  return prompt.substr(b + begin.size(), e - b - begin.size());
}

TEST(OutputParser, ParsesWhatTheRendererWrites) {
  const std::string args = "{\"city\": \"Paris\"}";
  Message call{Role::kAssistant, std::nullopt, std::nullopt, {ToolCall{"c1", "get_weather", args}}, "", false};
  Message with_text = call;
  with_text.content = "Let me look.";

  std::string turn = rendered_turn(ChatFamily::kQwen3, with_text, "<|im_start|>assistant\n", "<|im_end|>");
  expect_parse(ChatFamily::kQwen3, parsing(false, true, true), turn, Parsed{"Let me look.", "", {{"get_weather", args}}, 0});

  turn = rendered_turn(ChatFamily::kDeepSeekV31, call, "<｜Assistant｜></think>", "<｜end▁of▁sentence｜>");
  expect_parse(ChatFamily::kDeepSeekV31, parsing(false, true, true), turn, Parsed{"", "", {{"get_weather", args}}, 0});

  turn = rendered_turn(ChatFamily::kDeepSeekV3, call, "<｜Assistant｜>", "<｜end▁of▁sentence｜>");
  expect_parse(ChatFamily::kDeepSeekV3, parsing(false, false, true), turn, Parsed{"", "", {{"get_weather", args}}, 0});

  Message thought = call;
  thought.reasoning_content = "Need data.";
  turn = rendered_turn(ChatFamily::kGptOss, thought, "<|start|>assistant", "<|call|>");
  expect_parse(ChatFamily::kGptOss, parsing(false, true, true), turn, Parsed{"", "Need data.", {{"get_weather", args}}, 0});

  turn = rendered_turn(ChatFamily::kLlama31, call, "<|start_header_id|>assistant<|end_header_id|>\n\n", "<|eot_id|>");
  const Parsed llama = run(ChatFamily::kLlama31, parsing(false, false, true), {turn});
  ASSERT_EQ(llama.calls.size(), 1u);
  EXPECT_EQ(nlohmann::json::parse(llama.calls[0].second), nlohmann::json::parse(args));
}

}  // namespace
}  // namespace deepinfer::test
