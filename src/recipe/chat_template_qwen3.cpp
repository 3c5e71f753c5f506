// Qwen3 prompts (ChatML with <think> blocks), following the official chat template: reasoning is
// shown only for assistant turns after the last real user query, tool results are merged into
// one user turn, and enable_thinking=false pre-fills an empty think block.
#include <string>
#include <string_view>

#include "recipe/chat_template_families.h"
#include "recipe/python_compat.h"

namespace deepinfer {
namespace {

bool is_tool_response_wrapped(std::string_view content) {
  constexpr std::string_view kOpen = "<tool_response>";
  constexpr std::string_view kClose = "</tool_response>";
  return content.starts_with(kOpen) && content.ends_with(kClose);
}

// The index of the last user message that is a real query, not tool output passed as user text;
// the last index when there is none.
size_t last_query_index(const std::vector<Message>& messages) {
  for (size_t i = messages.size(); i-- > 0;) {
    const Message& m = messages[i];
    if (m.role == Role::kUser && !is_tool_response_wrapped(*m.content)) return i;
  }
  return messages.size() - 1;
}

void render_tools_system(const Conversation& conversation, PromptBuilder& b) {
  b.fixed("<|im_start|>system\n");
  const Message& first = conversation.messages.front();
  if (first.role == Role::kSystem) {
    b.text(*first.content);
    b.fixed("\n\n");
  }
  render_qwen_tools(conversation.tools, b);
}

void render_assistant(const Message& message, bool after_last_query, bool is_last, PromptBuilder& b) {
  std::string_view content = content_or_empty(message);
  std::string_view reasoning;
  if (message.reasoning_content) {
    reasoning = *message.reasoning_content;
  } else if (const size_t end = content.find("</think>"); end != std::string_view::npos) {
    // content.split('</think>')[0].rstrip('\n').split('<think>')[-1].lstrip('\n')
    std::string_view before = rstrip_chars(content.substr(0, end), "\n");
    if (const size_t open = before.rfind("<think>"); open != std::string_view::npos) {
      before = before.substr(open + 7);
    }
    reasoning = lstrip_chars(before, "\n");
    content = lstrip_chars(content.substr(content.rfind("</think>") + 8), "\n");
  }
  b.fixed("<|im_start|>assistant\n");
  if (after_last_query && (is_last || !reasoning.empty())) {
    b.fixed("<think>\n");
    b.text(strip_chars(reasoning, "\n"));
    b.fixed("\n</think>\n\n");
    b.text(lstrip_chars(content, "\n"));
  } else {
    b.text(content);
  }
  // The separator tests the content before that lstrip, as the template does.
  render_qwen_tool_calls(message.tool_calls, !content.empty(), b);
  b.fixed("<|im_end|>\n");
}

}  // namespace

void render_qwen_tool_calls(const std::vector<ToolCall>& calls, bool has_content, PromptBuilder& b) {
  for (size_t i = 0; i < calls.size(); ++i) {
    if (i > 0 || has_content) b.fixed("\n");
    b.fixed("<tool_call>\n{\"name\": \"");
    b.text(calls[i].name);
    b.fixed("\", \"arguments\": ");
    b.text(calls[i].arguments);
    b.fixed("}\n</tool_call>");
  }
}

void render_qwen_tools(const std::vector<nlohmann::ordered_json>& tools, PromptBuilder& b) {
  b.fixed(
      "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
      "You are provided with function signatures within <tools></tools> XML tags:\n<tools>");
  for (const nlohmann::ordered_json& tool : tools) {
    b.fixed("\n");
    b.text(python_json(tool));
  }
  b.fixed(
      "\n</tools>\n\nFor each function call, return a json object with function name and arguments "
      "within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, "
      "\"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n");
}

RenderResult render_qwen3(const Conversation& conversation, const ChatOptions& options) {
  PromptBuilder b({"<|im_start|>", "<|im_end|>", "<think>", "</think>", "<tool_call>", "</tool_call>",
                   "<tool_response>", "</tool_response>"});
  const std::vector<Message>& messages = conversation.messages;
  if (!conversation.tools.empty()) {
    render_tools_system(conversation, b);
  } else if (messages.front().role == Role::kSystem) {
    b.fixed("<|im_start|>system\n");
    b.text(*messages.front().content);
    b.fixed("<|im_end|>\n");
  }
  const size_t last_query = last_query_index(messages);
  for (size_t i = 0; i < messages.size(); ++i) {
    const Message& message = messages[i];
    const bool is_last = i + 1 == messages.size();
    switch (message.role) {
      case Role::kSystem:
        if (i == 0) break;  // already rendered above
        [[fallthrough]];
      case Role::kUser:
        b.fixed("<|im_start|>");
        b.fixed(role_name(message.role));
        b.fixed("\n");
        b.text(*message.content);
        b.fixed("<|im_end|>\n");
        break;
      case Role::kAssistant:
        render_assistant(message, i > last_query, is_last, b);
        break;
      case Role::kTool:
        if (i == 0 || messages[i - 1].role != Role::kTool) b.fixed("<|im_start|>user");
        b.fixed("\n<tool_response>\n");
        b.text(*message.content);
        b.fixed("\n</tool_response>");
        if (is_last || messages[i + 1].role != Role::kTool) b.fixed("<|im_end|>\n");
        break;
    }
  }
  if (options.add_generation_prompt) {
    b.fixed("<|im_start|>assistant\n");
    if (options.thinking == false) b.fixed("<think>\n\n</think>\n\n");
  }
  return std::move(b).finish();
}

}  // namespace deepinfer
