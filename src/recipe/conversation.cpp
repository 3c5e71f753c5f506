// Parsing of OpenAI Chat Completions messages and tools into a Conversation.
#include "recipe/conversation.h"

namespace deepinfer {
namespace {

using Json = nlohmann::ordered_json;

Error field_error(const std::string& path, const std::string& expected, const Json& got) {
  return Error{path + ": expected " + expected + ", got " + got.type_name()};
}

// A string, or a list of {"type": "text", "text": ...} parts joined with "\n\n" (the DeepSeek
// recipe's rule for multi-part content); the parts themselves go to *parts when it is not null,
// and image parts (whose bytes the API layer reads) to *parts as empty text with their index in
// *images.
Result<std::string> parse_text_content(const Json& value, const std::string& path,
                                       std::vector<std::string>* parts = nullptr,
                                       std::vector<size_t>* images = nullptr) {
  if (value.is_string()) return value.get<std::string>();
  if (!value.is_array()) return field_error(path, "a string or a list of text parts", value);
  std::string text;
  size_t text_parts = 0;
  for (size_t i = 0; i < value.size(); ++i) {
    const Json& part = value[i];
    const std::string part_path = path + "[" + std::to_string(i) + "]";
    if (!part.is_object()) return field_error(part_path, "an object", part);
    const auto type = part.find("type");
    if (images != nullptr && type != part.end() && (*type == "image_url" || *type == "image")) {
      images->push_back(parts->size());
      parts->emplace_back();
      continue;
    }
    if (type == part.end() || !type->is_string() || *type != "text") {
      return Error{part_path + ".type: only \"text\" parts can be rendered into a prompt"};
    }
    const auto part_text = part.find("text");
    if (part_text == part.end() || !part_text->is_string()) {
      return Error{part_path + ".text: expected a string"};
    }
    if (text_parts++ > 0) text += "\n\n";
    text += part_text->get<std::string>();
    if (parts != nullptr) parts->push_back(part_text->get<std::string>());
  }
  return text;
}

Result<std::optional<std::string>> parse_optional_content(const Json& message, const char* key, const std::string& path,
                                                          std::vector<std::string>* parts = nullptr,
                                                          std::vector<size_t>* images = nullptr) {
  const auto it = message.find(key);
  if (it == message.end() || it->is_null()) return std::optional<std::string>();
  auto text = parse_text_content(*it, path + "." + key, parts, images);
  if (!text.ok()) return text.error();
  return std::optional<std::string>(std::move(*text));
}

Result<std::string> required_string(const Json& object, const char* key, const std::string& path) {
  const auto it = object.find(key);
  if (it == object.end()) return Error{path + "." + key + ": missing"};
  if (!it->is_string()) return field_error(path + "." + key, "a string", *it);
  return it->get<std::string>();
}

Result<ToolCall> parse_tool_call(const Json& value, const std::string& path) {
  if (!value.is_object()) return field_error(path, "an object", value);
  ToolCall call;
  if (const auto id = value.find("id"); id != value.end() && !id->is_null()) {
    if (!id->is_string()) return field_error(path + ".id", "a string", *id);
    call.id = id->get<std::string>();
  }
  if (const auto type = value.find("type"); type != value.end() && !type->is_null()) {
    if (!type->is_string() || *type != "function") {
      return Error{path + ".type: only \"function\" tool calls are supported"};
    }
  }
  const auto function = value.find("function");
  if (function == value.end() || !function->is_object()) {
    return Error{path + ".function: expected an object with name and arguments"};
  }
  auto name = required_string(*function, "name", path + ".function");
  if (!name.ok()) return name.error();
  auto arguments = required_string(*function, "arguments", path + ".function");
  if (!arguments.ok()) return arguments.error();
  call.name = std::move(*name);
  call.arguments = std::move(*arguments);
  return call;
}

Result<Role> parse_role(const Json& message, const std::string& path) {
  const auto it = message.find("role");
  if (it == message.end() || !it->is_string()) return Error{path + ".role: expected a string"};
  const std::string& role = it->get_ref<const std::string&>();
  if (role == "system" || role == "developer") return Role::kSystem;
  if (role == "user") return Role::kUser;
  if (role == "assistant") return Role::kAssistant;
  if (role == "tool") return Role::kTool;
  return Error{path + ".role: expected system, developer, user, assistant or tool, got '" + role + "'"};
}

Result<Message> parse_message(const Json& value, const std::string& path) {
  if (!value.is_object()) return field_error(path, "an object", value);
  Message message;
  auto role = parse_role(value, path);
  if (!role.ok()) return role.error();
  message.role = *role;
  auto content = parse_optional_content(value, "content", path, &message.content_parts, &message.image_parts);
  if (!content.ok()) return content.error();
  message.content = std::move(*content);

  if (message.role != Role::kAssistant) {
    if (!message.content) return Error{path + ".content: expected a string or a list of text parts"};
    if (message.role == Role::kTool) {
      if (const auto id = value.find("tool_call_id"); id != value.end() && id->is_string()) {
        message.tool_call_id = id->get<std::string>();
      }
    }
    return message;
  }

  auto reasoning = parse_optional_content(value, "reasoning_content", path);
  if (!reasoning.ok()) return reasoning.error();
  message.reasoning_content = std::move(*reasoning);
  if (const auto calls = value.find("tool_calls"); calls != value.end() && !calls->is_null()) {
    if (!calls->is_array() || calls->empty()) {
      return Error{path + ".tool_calls: expected a non-empty list (leave it out when there are none)"};
    }
    for (size_t i = 0; i < calls->size(); ++i) {
      auto call = parse_tool_call((*calls)[i], path + ".tool_calls[" + std::to_string(i) + "]");
      if (!call.ok()) return call.error();
      message.tool_calls.push_back(std::move(*call));
    }
  }
  if (!message.content && message.tool_calls.empty()) {
    return Error{path + ": an assistant message needs content or tool_calls"};
  }
  if (const auto prefix = value.find("prefix"); prefix != value.end() && !prefix->is_null()) {
    if (!prefix->is_boolean()) return field_error(path + ".prefix", "a boolean", *prefix);
    message.prefix = prefix->get<bool>();
  }
  return message;
}

Result<nlohmann::ordered_json> parse_tool(const Json& value, const std::string& path) {
  if (!value.is_object()) return field_error(path, "an object", value);
  const auto type = value.find("type");
  if (type != value.end() && !(type->is_string() && *type == "function")) {
    return Error{path + ".type: only \"function\" tools are supported"};
  }
  const auto function = value.find("function");
  if (function == value.end() || !function->is_object()) {
    return Error{path + ".function: expected an object with name, description and parameters"};
  }
  auto name = required_string(*function, "name", path + ".function");
  if (!name.ok()) return name.error();
  if (name->empty()) return Error{path + ".function.name: must not be empty"};
  if (const auto description = function->find("description");
      description != function->end() && !description->is_string()) {
    return field_error(path + ".function.description", "a string", *description);
  }
  if (const auto parameters = function->find("parameters"); parameters != function->end() && !parameters->is_object()) {
    return field_error(path + ".function.parameters", "a JSON Schema object", *parameters);
  }
  return value;
}

}  // namespace

Result<Conversation> parse_conversation(const nlohmann::ordered_json& request) {
  if (!request.is_object()) return field_error("request", "an object with messages", request);
  const auto messages = request.find("messages");
  if (messages == request.end() || !messages->is_array()) return Error{"messages: expected a list"};
  if (messages->empty()) return Error{"messages: must not be empty"};
  Conversation conversation;
  for (size_t i = 0; i < messages->size(); ++i) {
    auto message = parse_message((*messages)[i], "messages[" + std::to_string(i) + "]");
    if (!message.ok()) return message.error();
    conversation.messages.push_back(std::move(*message));
  }
  if (const auto tools = request.find("tools"); tools != request.end() && !tools->is_null()) {
    if (!tools->is_array()) return field_error("tools", "a list", *tools);
    for (size_t i = 0; i < tools->size(); ++i) {
      auto tool = parse_tool((*tools)[i], "tools[" + std::to_string(i) + "]");
      if (!tool.ok()) return tool.error();
      conversation.tools.push_back(std::move(*tool));
    }
  }
  return conversation;
}

const char* role_name(Role role) {
  switch (role) {
    case Role::kSystem:
      return "system";
    case Role::kUser:
      return "user";
    case Role::kAssistant:
      return "assistant";
    case Role::kTool:
      return "tool";
  }
  return "unknown";
}

}  // namespace deepinfer
