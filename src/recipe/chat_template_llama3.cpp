// Llama 3 prompts: the plain header template of Llama 3, and the tool-calling template of
// Llama 3.1 / 3.2 / 3.3 Instruct.
#include <cstdio>
#include <string>
#include <string_view>

#include "core/json_nesting.h"
#include "recipe/chat_template_families.h"
#include "recipe/python_compat.h"

namespace deepinfer {
namespace {

constexpr std::string_view kMonths[] = {"Jan", "Feb", "Mar", "Apr", "May", "Jun",
                                        "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};

PromptBuilder llama_builder() {
  return PromptBuilder(
      {"<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>", "<|eom_id|>", "<|python_tag|>"});
}

void render_header(std::string_view role, PromptBuilder& b) {
  b.fixed("<|start_header_id|>");
  b.fixed(role);
  b.fixed("<|end_header_id|>\n\n");
}

// strftime("%d %b %Y") in the C locale, e.g. "05 Jul 2025".
Result<std::string> today_date_string(const ChatOptions& options) {
  auto date = chat_date(options);
  if (!date.ok()) return date.error();
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%02d %s %04d", date->day, kMonths[date->month - 1].data(), date->year);
  return std::string(buf);
}

void render_tool_list(const Conversation& conversation, PromptBuilder& b) {
  b.fixed(
      "Respond in the format {\"name\": function name, \"parameters\": dictionary of argument name "
      "and its value}.Do not use variables.\n\n");
  for (const nlohmann::ordered_json& tool : conversation.tools) {
    b.text(python_json(tool, 4));
    b.fixed("\n\n");
  }
}

// The one call of an assistant turn as {"name": ..., "parameters": <arguments as JSON>}.
Result<void> render_tool_call(const Message& message, size_t index, PromptBuilder& b) {
  if (message.tool_calls.size() != 1) return Error{"This model only supports single tool-calls at once!"};
  const ToolCall& call = message.tool_calls[0];
  const auto arguments = json_nesting_depth(call.arguments) > kMaxJsonNesting
                             ? nlohmann::ordered_json(nlohmann::ordered_json::value_t::discarded)
                             : nlohmann::ordered_json::parse(call.arguments, nullptr, /*allow_exceptions=*/false);
  if (arguments.is_discarded()) {
    return Error{"messages[" + std::to_string(index) + "].tool_calls[0].function.arguments: expected JSON, got '" +
                 call.arguments + "'"};
  }
  render_header("assistant", b);
  b.fixed("{\"name\": \"");
  b.text(call.name);
  b.fixed("\", \"parameters\": ");
  b.text(python_json(arguments));
  b.fixed("}<|eot_id|>");
  return {};
}

}  // namespace

RenderResult render_llama3(const Conversation& conversation, const ChatOptions& options) {
  PromptBuilder b = llama_builder();
  b.fixed("<|begin_of_text|>");
  for (const Message& message : conversation.messages) {
    render_header(role_name(message.role), b);
    b.text(python_trim(content_or_empty(message)));
    b.fixed("<|eot_id|>");
  }
  if (options.add_generation_prompt) render_header("assistant", b);
  return std::move(b).finish();
}

// Kept quirks: tool results are printed as a JSON string (the template tests "content is
// iterable", which every string is), the tool list goes into the first message after the system
// one whatever its role, and one tool call per message at most.
RenderResult render_llama31(const Conversation& conversation, const ChatOptions& options, int version) {
  std::string date_string = "26 Jul 2024";
  if (options.date_string) {
    date_string = *options.date_string;
  } else if (version >= 32) {
    auto today = today_date_string(options);
    if (!today.ok()) return today.error();
    date_string = std::move(*today);
  }
  const bool has_tools = !conversation.tools.empty();
  const std::vector<Message>& messages = conversation.messages;
  size_t next = 0;
  std::string_view system_message;
  if (messages[0].role == Role::kSystem) {
    system_message = python_trim(*messages[0].content);
    next = 1;
  }

  PromptBuilder b = llama_builder();
  b.fixed("<|begin_of_text|>");
  render_header("system", b);
  if (has_tools) b.fixed("Environment: ipython\n");
  b.fixed("Cutting Knowledge Date: December 2023\nToday Date: ");
  b.text(date_string);
  b.fixed("\n\n");
  if (has_tools && !options.tools_in_user_message) {
    b.fixed(
        "You have access to the following functions. To call a function, please respond with JSON "
        "for a function call.");
    render_tool_list(conversation, b);
  }
  b.text(system_message);
  b.fixed("<|eot_id|>");

  if (has_tools && options.tools_in_user_message) {
    if (next == messages.size()) {
      return Error{"Cannot put tools in the first user message when there's no first user message!"};
    }
    render_header("user", b);
    b.fixed(
        "Given the following functions, please respond with a JSON for a function call with its "
        "proper arguments that best answers the given prompt.\n\n");
    render_tool_list(conversation, b);
    b.text(python_trim(content_or_empty(messages[next])));
    b.fixed("<|eot_id|>");
    ++next;
  }

  for (size_t i = next; i < messages.size(); ++i) {
    const Message& message = messages[i];
    if (message.role == Role::kTool) {
      render_header("ipython", b);
      b.text(python_json(*message.content));
      b.fixed("<|eot_id|>");
    } else if (!message.tool_calls.empty()) {
      auto call = render_tool_call(message, i, b);
      if (!call.ok()) return call.error();
    } else {
      render_header(role_name(message.role), b);
      b.text(python_trim(content_or_empty(message)));
      b.fixed("<|eot_id|>");
    }
  }
  if (options.add_generation_prompt) render_header("assistant", b);
  return std::move(b).finish();
}

}  // namespace deepinfer
