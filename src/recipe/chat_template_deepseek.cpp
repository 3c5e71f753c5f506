// DeepSeek-V3, R1 and V3.1 prompts, following the official chat templates statement by statement,
// quirks included (the models were trained on them).
#include <string>
#include <string_view>

#include "recipe/chat_template_families.h"

namespace deepinfer {
namespace {

constexpr std::string_view kBos = "<｜begin▁of▁sentence｜>";
constexpr std::string_view kEos = "<｜end▁of▁sentence｜>";

PromptBuilder deepseek_builder() {
  return PromptBuilder({kBos, kEos, "<｜User｜>", "<｜Assistant｜>", "<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>",
                        "<｜tool▁call▁begin｜>", "<｜tool▁call▁end｜>", "<｜tool▁sep｜>", "<｜tool▁outputs▁begin｜>",
                        "<｜tool▁outputs▁end｜>", "<｜tool▁output▁begin｜>", "<｜tool▁output▁end｜>", "<think>",
                        "</think>"});
}

// All system messages, wherever they are, joined with "\n\n" and put right after BOS.
void render_system_prompt(const Conversation& conversation, PromptBuilder& b) {
  b.fixed(kBos);
  bool first = true;
  for (const Message& message : conversation.messages) {
    if (message.role != Role::kSystem) continue;
    if (!first) b.fixed("\n\n");
    b.text(*message.content);
    first = false;
  }
}

// V3 / R1 call format: type, name, then the arguments in a ```json block.
void render_v3_call(const ToolCall& call, PromptBuilder& b) {
  b.fixed("<｜tool▁call▁begin｜>function<｜tool▁sep｜>");
  b.text(call.name);
  b.fixed("\n```json\n");
  b.text(call.arguments);
  b.fixed("\n```<｜tool▁call▁end｜>");
}

// The text after the last "</think>" (Python: content.split('</think>')[-1]).
std::string_view after_last_think_end(std::string_view content) {
  const size_t pos = content.rfind("</think>");
  return pos == std::string_view::npos ? content : content.substr(pos + 8);
}

// DeepSeek-V3 and R1 share the template; R1 cuts reasoning out of history, recognises tool calls by
// the tool_calls key (V3 by content being none), always closes a call block and starts with <think>.
// Kept quirks: is_first is never reset, so only the first tool-call turn of a conversation opens
// with <｜tool▁calls▁begin｜>; V3 closes a call block only after a second call.
RenderResult render_v3_or_r1(const Conversation& conversation, const ChatOptions& options, bool r1) {
  PromptBuilder b = deepseek_builder();
  render_system_prompt(conversation, b);
  bool is_first = false;
  bool is_tool = false;
  bool is_output_first = true;
  for (const Message& message : conversation.messages) {
    switch (message.role) {
      case Role::kSystem:
        break;
      case Role::kUser:
        is_tool = false;
        b.fixed("<｜User｜>");
        b.text(*message.content);
        break;
      case Role::kAssistant: {
        const bool calls = r1 ? !message.tool_calls.empty() : !message.content.has_value();
        if (calls) {
          is_tool = false;
          for (const ToolCall& call : message.tool_calls) {
            if (!is_first) {
              b.fixed("<｜Assistant｜>");
              if (message.content) b.text(*message.content);
              b.fixed("<｜tool▁calls▁begin｜>");
              render_v3_call(call, b);
              is_first = true;
            } else {
              b.fixed("\n");
              render_v3_call(call, b);
              if (!r1) b.fixed("<｜tool▁calls▁end｜><｜end▁of▁sentence｜>");
            }
          }
          if (r1) b.fixed("<｜tool▁calls▁end｜><｜end▁of▁sentence｜>");
        } else if (is_tool) {
          b.fixed("<｜tool▁outputs▁end｜>");
          b.text(*message.content);
          b.fixed(kEos);
          is_tool = false;
        } else {
          b.fixed("<｜Assistant｜>");
          b.text(r1 ? after_last_think_end(*message.content) : std::string_view(*message.content));
          b.fixed(kEos);
        }
        break;
      }
      case Role::kTool:
        is_tool = true;
        if (is_output_first) {
          b.fixed("<｜tool▁outputs▁begin｜><｜tool▁output▁begin｜>");
          is_output_first = false;
        } else {
          b.fixed(r1 ? "<｜tool▁output▁begin｜>" : "\n<｜tool▁output▁begin｜>");
        }
        b.text(*message.content);
        b.fixed("<｜tool▁output▁end｜>");
        break;
    }
  }
  if (is_tool) b.fixed("<｜tool▁outputs▁end｜>");
  if (options.add_generation_prompt && !is_tool) b.fixed(r1 ? "<｜Assistant｜><think>\n" : "<｜Assistant｜>");
  return std::move(b).finish();
}

}  // namespace

RenderResult render_deepseek_v3(const Conversation& conversation, const ChatOptions& options) {
  return render_v3_or_r1(conversation, options, /*r1=*/false);
}

RenderResult render_deepseek_r1(const Conversation& conversation, const ChatOptions& options) {
  return render_v3_or_r1(conversation, options, /*r1=*/true);
}

// Kept quirk: the generation prompt follows a finished assistant turn too (not a prefix one).
RenderResult render_deepseek_v31(const Conversation& conversation, const ChatOptions& options) {
  const bool thinking = options.thinking.value_or(false);
  PromptBuilder b = deepseek_builder();
  render_system_prompt(conversation, b);
  bool is_only_sys = false;
  for (const Message& message : conversation.messages) {
    if (message.role == Role::kSystem) is_only_sys = true;
  }
  bool is_tool = false;
  bool is_last_user = false;
  bool is_prefix = false;
  for (const Message& message : conversation.messages) {
    if (message.role == Role::kUser) {
      is_tool = false;
      is_last_user = true;
      b.fixed("<｜User｜>");
      b.text(*message.content);
    } else if (message.role == Role::kAssistant && !message.tool_calls.empty()) {
      if (is_last_user || is_only_sys) b.fixed("<｜Assistant｜></think>");
      is_last_user = false;
      is_tool = false;
      for (size_t i = 0; i < message.tool_calls.size(); ++i) {
        const ToolCall& call = message.tool_calls[i];
        if (i == 0) {
          if (message.content) b.text(*message.content);
          b.fixed("<｜tool▁calls▁begin｜>");
        }
        b.fixed("<｜tool▁call▁begin｜>");
        b.text(call.name);
        b.fixed("<｜tool▁sep｜>");
        b.text(call.arguments);
        b.fixed("<｜tool▁call▁end｜>");
      }
      b.fixed("<｜tool▁calls▁end｜><｜end▁of▁sentence｜>");
    } else if (message.role == Role::kAssistant) {
      if (is_last_user) b.fixed(message.prefix && thinking ? "<｜Assistant｜><think>" : "<｜Assistant｜></think>");
      if (message.prefix) is_prefix = true;
      is_last_user = false;
      std::string_view content = *message.content;
      if (is_tool) {
        is_tool = false;
      } else if (const size_t pos = content.find("</think>"); pos != std::string_view::npos) {
        content = content.substr(pos + 8);  // content.split('</think>', 1)[1]
      }
      b.text(content);
      b.fixed(kEos);
    } else if (message.role == Role::kTool) {
      is_last_user = false;
      is_tool = true;
      b.fixed("<｜tool▁output▁begin｜>");
      b.text(*message.content);
      b.fixed("<｜tool▁output▁end｜>");
    }
    if (message.role != Role::kSystem) is_only_sys = false;
  }
  if (options.add_generation_prompt && !is_tool && (is_last_user || is_only_sys || !is_prefix)) {
    b.fixed(thinking ? "<｜Assistant｜><think>" : "<｜Assistant｜></think>");
  }
  return std::move(b).finish();
}

}  // namespace deepinfer
