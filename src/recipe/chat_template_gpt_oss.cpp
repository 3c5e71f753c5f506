// GPT-OSS prompts in the harmony format, following the official chat template: system message with
// date and reasoning effort, developer message with the tools as a TypeScript-like namespace,
// analysis / commentary / final channels.
#include <cstdio>
#include <optional>
#include <string>
#include <string_view>

#include "core/json_nesting.h"
#include "recipe/chat_template_families.h"
#include "recipe/python_compat.h"

namespace deepinfer {
namespace {

using Json = nlohmann::ordered_json;

// What Jinja evaluates for spec.key: the member, or null when spec is not an object or lacks it.
const Json& member(const Json& spec, const char* key) {
  static const Json kNull;
  if (!spec.is_object()) return kNull;
  const auto it = spec.find(key);
  return it == spec.end() ? kNull : *it;
}

bool has_member(const Json& spec, const char* key) { return spec.is_object() && spec.contains(key); }

bool type_is(const Json& spec, std::string_view type) {
  const Json& t = member(spec, "type");
  return t.is_string() && t.get_ref<const std::string&>() == type;
}

bool is_required(const Json& object_spec, const std::string& name) {
  const Json& required = member(object_spec, "required");
  if (!python_truthy(required) || !required.is_array()) return false;
  for (const Json& r : required) {
    if (r.is_string() && r.get_ref<const std::string&>() == name) return true;
  }
  return false;
}

std::string join(const Json& list, std::string_view separator) {
  std::string out;
  for (size_t i = 0; i < list.size(); ++i) {
    if (i > 0) out += separator;
    out += python_str(list[i]);
  }
  return out;
}

// The template's render_typescript_type macro, whitespace included.
std::string typescript_type(const Json& spec) {
  const Json& type = member(spec, "type");
  if (type_is(spec, "array")) {
    std::string out;
    const Json& items = member(spec, "items");
    if (!python_truthy(items)) {
      out = "any[]";
    } else if (type_is(items, "string")) {
      out = "string[]";
    } else if (type_is(items, "number") || type_is(items, "integer")) {
      out = "number[]";
    } else if (type_is(items, "boolean")) {
      out = "boolean[]";
    } else {
      const std::string inner = typescript_type(items);
      out = inner == "object | object" || python_len(inner) > 50 ? "any[]" : inner + "[]";
    }
    if (python_truthy(member(spec, "nullable"))) out += " | null";
    return out;
  }
  if (type.is_array() && !type.empty()) return type.size() > 1 ? join(type, " | ") : python_str(type[0]);
  if (python_truthy(member(spec, "oneOf"))) {
    // The template's has_object_variants flag is set inside a for loop, where Jinja scoping
    // discards it, so object variants never collapse to "any".
    const Json& variants = member(spec, "oneOf");
    std::string out;
    for (size_t i = 0; i < variants.size(); ++i) {
      const Json& variant = variants[i];
      out += typescript_type(variant);
      if (python_truthy(member(variant, "description"))) out += "// " + python_str(member(variant, "description"));
      if (has_member(variant, "default")) out += "                    // default: " + python_json(variant["default"]);
      if (i + 1 < variants.size()) out += " | \n";
    }
    return out;
  }
  if (type_is(spec, "string")) {
    const Json& values = member(spec, "enum");
    if (python_truthy(values)) return "\"" + join(values, "\" | \"") + "\"";
    return python_truthy(member(spec, "nullable")) ? "string | null" : "string";
  }
  if (type_is(spec, "number") || type_is(spec, "integer")) return "number";
  if (type_is(spec, "boolean")) return "boolean";
  if (type_is(spec, "object")) {
    const Json& properties = member(spec, "properties");
    if (!python_truthy(properties)) return "object";
    std::string out = "{\n";
    bool first = true;
    for (const auto& [name, property] : properties.items()) {
      if (!first) out += ", ";
      first = false;
      out += name;
      if (!is_required(spec, name)) out += "?";
      out += ": \n                " + typescript_type(property);
    }
    return out + "}";
  }
  return "any";
}

void render_parameter(const std::string& name, const Json& spec, const Json& parameters, PromptBuilder& b) {
  if (python_truthy(member(spec, "description"))) b.text("// " + python_str(spec["description"]) + "\n");
  std::string line = name;
  if (!is_required(parameters, name)) line += "?";
  line += ": " + typescript_type(spec);
  if (has_member(spec, "default")) {
    const Json& value = spec["default"];
    if (python_truthy(member(spec, "enum"))) {
      line += ", // default: " + python_str(value);
    } else if (python_truthy(member(spec, "oneOf"))) {
      line += "// default: " + python_str(value);
    } else {
      line += ", // default: " + python_json(value);
    }
  }
  b.text(line + ",\n");
}

// The template's render_tool_namespace("functions", tools). A tool without a description gets no
// comment line (the template fails on it).
void render_tool_namespace(const std::vector<Json>& tools, PromptBuilder& b) {
  b.fixed("## functions\n\nnamespace functions {\n\n");
  for (const Json& tool : tools) {
    const Json& function = tool["function"];
    if (has_member(function, "description")) b.text("// " + python_str(function["description"]) + "\n");
    b.fixed("type ");
    b.text(function["name"].get<std::string>());
    b.fixed(" = ");
    const Json& parameters = member(function, "parameters");
    if (python_truthy(parameters) && python_truthy(member(parameters, "properties"))) {
      b.fixed("(_: {\n");
      for (const auto& [name, spec] : parameters["properties"].items()) render_parameter(name, spec, parameters, b);
      b.fixed("}) => any;\n\n");
    } else {
      b.fixed("() => any;\n\n");
    }
  }
  b.fixed("} // namespace functions");
}

Result<void> check_no_channel_tags(std::string_view text, const char* field) {
  if (text.find("<|channel|>analysis<|message|>") == std::string_view::npos &&
      text.find("<|channel|>final<|message|>") == std::string_view::npos) {
    return {};
  }
  return Error{std::string("You have passed a message containing <|channel|> tags in the ") + field +
               " field. Instead of doing this, you should pass analysis messages (the string between "
               "'<|message|>' and '<|end|>') in the 'thinking' field, and final messages (the string "
               "between '<|message|>' and '<|end|>') in the 'content' field."};
}

void render_system(const Conversation& conversation, const ChatOptions& options, const CalendarDate& date,
                   PromptBuilder& b) {
  char date_text[16];
  std::snprintf(date_text, sizeof(date_text), "%04d-%02d-%02d", date.year, date.month, date.day);
  b.fixed("<|start|>system<|message|>");
  b.text(options.model_identity.value_or("You are ChatGPT, a large language model trained by OpenAI."));
  b.fixed("\nKnowledge cutoff: 2024-06\nCurrent date: ");
  b.text(date_text);
  b.fixed("\n\nReasoning: ");
  b.text(options.reasoning_effort.value_or("medium"));
  b.fixed("\n\n# Valid channels: analysis, commentary, final. Channel must be included for every message.");
  if (!conversation.tools.empty()) b.fixed("\nCalls to these tools must go to the commentary channel: 'functions'.");
  b.fixed("<|end|>");
}

// One assistant message (messages[i]); last_tool_call names the function that the tool messages
// after it answer.
Result<void> render_assistant(const std::vector<Message>& messages, size_t i, const ChatOptions& options,
                              std::optional<std::string>& last_tool_call, PromptBuilder& b) {
  const Message& message = messages[i];
  const std::string& content = content_or_empty(message);
  DI_TRY(check_no_channel_tags(content, "content"));
  if (message.reasoning_content) DI_TRY(check_no_channel_tags(*message.reasoning_content, "thinking"));
  const std::string& thinking = message.reasoning_content.value_or(std::string());
  if (!message.tool_calls.empty()) {
    bool final_message_follows = false;
    for (size_t j = i + 1; j < messages.size(); ++j) {
      if (messages[j].role == Role::kAssistant && messages[j].tool_calls.empty()) final_message_follows = true;
    }
    if (!content.empty() && !thinking.empty()) {
      return Error{
          "Cannot pass both content and thinking in an assistant message with tool calls! Put the "
          "analysis message in one or the other, but not both."};
    }
    // Text next to a call is chain of thought: kept until a final answer follows, then dropped
    // like all earlier analysis.
    const std::string& analysis = content.empty() ? thinking : content;
    if (!analysis.empty() && !final_message_follows) {
      b.fixed("<|start|>assistant<|channel|>analysis<|message|>");
      b.text(analysis);
      b.fixed("<|end|>");
    }
    const ToolCall& call = message.tool_calls[0];
    const Json arguments = json_nesting_depth(call.arguments) > kMaxJsonNesting
                               ? Json(Json::value_t::discarded)
                               : Json::parse(call.arguments, nullptr, /*allow_exceptions=*/false);
    if (arguments.is_discarded()) {
      return Error{"messages[" + std::to_string(i) + "].tool_calls[0].function.arguments: expected JSON, got '" +
                   call.arguments + "'"};
    }
    b.fixed("<|start|>assistant to=functions.");
    b.text(call.name);
    b.fixed("<|channel|>commentary json<|message|>");
    b.text(python_json(arguments));
    b.fixed("<|call|>");
    last_tool_call = call.name;
  } else if (i + 1 == messages.size() && !options.add_generation_prompt) {
    if (message.reasoning_content) {
      b.fixed("<|start|>assistant<|channel|>analysis<|message|>");
      b.text(thinking);
      b.fixed("<|end|>");
    }
    b.fixed("<|start|>assistant<|channel|>final<|message|>");
    b.text(content);
    b.fixed("<|return|>");
  } else {
    b.fixed("<|start|>assistant<|channel|>final<|message|>");
    b.text(content);
    b.fixed("<|end|>");
    last_tool_call.reset();
  }
  return {};
}

}  // namespace

// Kept quirks: only the first tool call of a message is rendered, tool results are printed as JSON
// strings, and nested types carry the whitespace the template's Jinja emits.
RenderResult render_gpt_oss(const Conversation& conversation, const ChatOptions& options) {
  auto date = chat_date(options);
  if (!date.ok()) return date.error();
  PromptBuilder b({"<|start|>", "<|end|>", "<|message|>", "<|channel|>", "<|constrain|>", "<|call|>", "<|return|>"});
  render_system(conversation, options, *date, b);

  const std::vector<Message>& messages = conversation.messages;
  const bool has_developer = messages[0].role == Role::kSystem;
  const std::string_view developer_message = has_developer ? std::string_view(*messages[0].content) : "";
  if (!developer_message.empty() || !conversation.tools.empty()) {
    b.fixed("<|start|>developer<|message|>");
    if (!developer_message.empty()) {
      b.fixed("# Instructions\n\n");
      b.text(developer_message);
      b.fixed("\n\n");
    }
    if (!conversation.tools.empty()) {
      b.fixed("# Tools\n\n");
      render_tool_namespace(conversation.tools, b);
    }
    b.fixed("<|end|>");
  }

  std::optional<std::string> last_tool_call;
  for (size_t i = has_developer ? 1 : 0; i < messages.size(); ++i) {
    const Message& message = messages[i];
    if (message.role == Role::kUser) {
      b.fixed("<|start|>user<|message|>");
      b.text(*message.content);
      b.fixed("<|end|>");
    } else if (message.role == Role::kTool) {
      if (!last_tool_call)
        return Error{"Message has tool role, but there was no previous assistant message with a tool call!"};
      b.fixed("<|start|>functions.");
      b.text(*last_tool_call);
      b.fixed(" to=assistant<|channel|>commentary<|message|>");
      b.text(python_json(*message.content));
      b.fixed("<|end|>");
    } else if (message.role == Role::kAssistant) {
      DI_TRY(render_assistant(messages, i, options, last_tool_call, b));
    }
  }
  if (options.add_generation_prompt) b.fixed("<|start|>assistant");
  return std::move(b).finish();
}

}  // namespace deepinfer
