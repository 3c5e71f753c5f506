// Anthropic Messages request bodies (system, content blocks, tools with input_schema, thinking,
// max_tokens, stop_sequences, top_k) -> ApiRequest.
#include "recipe/api_request_internal.h"

namespace deepinfer::api {
namespace {

std::string block_path(size_t i, size_t j) {
  return "messages[" + std::to_string(i) + "].content[" + std::to_string(j) + "]";
}

// A string or a list of text blocks, joined with "\n\n".
std::variant<std::string, ApiError> read_text_blocks(const Json& content, const std::string& path) {
  if (content.is_string()) return content.get<std::string>();
  if (!content.is_array()) return wrong_type(path, "a string or a list of text blocks", content);
  std::string text;
  for (size_t j = 0; j < content.size(); ++j) {
    const std::string p = path + "[" + std::to_string(j) + "]";
    if (!content[j].is_object() || content[j].value("type", "") != "text" || !content[j].contains("text") ||
        !content[j]["text"].is_string()) {
      return bad_request(p, p + ": expected a text block {\"type\": \"text\", \"text\": ...}");
    }
    if (!text.empty()) text += "\n\n";
    text += content[j]["text"].get<std::string>();
  }
  return text;
}

// A user turn's text and image blocks become one message (its parts kept when it holds images, for
// the templates that place them); tool_result blocks are tool messages between such turns.
std::optional<ApiError> read_user(const Json& content, size_t i, Conversation& conversation) {
  std::string text;
  std::vector<std::string> parts;
  std::vector<size_t> image_parts;
  const auto flush_text = [&] {
    if (text.empty() && image_parts.empty()) return;
    Message m;
    m.content = std::exchange(text, "");
    if (!image_parts.empty()) {
      m.content_parts = std::move(parts);
      m.image_parts = std::move(image_parts);
    }
    parts.clear();
    image_parts.clear();
    conversation.messages.push_back(std::move(m));
  };
  for (size_t j = 0; j < content.size(); ++j) {
    const Json& block = content[j];
    const std::string path = block_path(i, j);
    if (!block.is_object()) return wrong_type(path, "a content block object", block);
    const std::string type = block.value("type", "");
    if (type == "text") {
      if (auto e = check_string(block, "text", path)) return e;
      if (!text.empty()) text += "\n\n";
      text += block.value("text", "");
      parts.push_back(block.value("text", ""));
    } else if (type == "image") {  // its bytes were read by read_image_parts
      image_parts.push_back(parts.size());
      parts.emplace_back();
    } else if (type == "tool_result") {
      flush_text();
      if (auto e = check_string(block, "tool_use_id", path)) return e;
      Message m;
      m.role = Role::kTool;
      m.tool_call_id = block.value("tool_use_id", "");
      m.content = "";
      if (const Json* c = find_field(block, "content")) {
        auto result = read_text_blocks(*c, path + ".content");
        if (auto* e = std::get_if<ApiError>(&result)) return *e;
        m.content = std::get<std::string>(std::move(result));
      }
      conversation.messages.push_back(std::move(m));
    } else {
      return bad_request(
          path + ".type",
          path + ".type: '" + type + "' blocks are not supported in user messages (text, image and tool_result are)");
    }
  }
  flush_text();
  return std::nullopt;
}

std::optional<ApiError> read_assistant(const Json& content, size_t i, Conversation& conversation) {
  Message m;
  m.role = Role::kAssistant;
  for (size_t j = 0; j < content.size(); ++j) {
    const Json& block = content[j];
    const std::string path = block_path(i, j);
    if (!block.is_object()) return wrong_type(path, "a content block object", block);
    const std::string type = block.value("type", "");
    if (type == "text") {
      if (auto e = check_string(block, "text", path)) return e;
      m.content = m.content ? *m.content + "\n\n" + block.value("text", "") : block.value("text", "");
    } else if (type == "thinking") {
      if (auto e = check_string(block, "thinking", path)) return e;
      const std::string thinking = block.value("thinking", "");
      m.reasoning_content = m.reasoning_content ? *m.reasoning_content + "\n\n" + thinking : thinking;
    } else if (type == "tool_use") {
      if (auto e = check_string(block, "id", path)) return e;
      if (auto e = check_string(block, "name", path)) return e;
      if (auto e = check_object(block, "input", path)) return e;
      const Json* input = find_field(block, "input");
      m.tool_calls.push_back(ToolCall{block.value("id", ""), block.value("name", ""),
                                      input != nullptr ? input->dump() : std::string("{}")});
    } else if (type != "redacted_thinking") {
      return bad_request(path + ".type", path + ".type: '" + type + "' blocks are not supported in assistant messages");
    }
  }
  if (!m.content && m.tool_calls.empty()) m.content = "";
  conversation.messages.push_back(std::move(m));
  return std::nullopt;
}

std::optional<ApiError> read_messages(const Json& messages, Conversation& conversation) {
  for (size_t i = 0; i < messages.size(); ++i) {
    const Json& message = messages[i];
    const std::string path = "messages[" + std::to_string(i) + "]";
    if (!message.is_object()) return wrong_type(path, "an object", message);
    if (auto e = check_string(message, "role", path)) return e;
    const std::string role = message.value("role", "");
    const Json* content = find_field(message, "content");
    if (content == nullptr) return bad_request(path + ".content", path + ".content: missing");
    if (!content->is_string() && !content->is_array()) {
      return wrong_type(path + ".content", "a string or a list of content blocks", *content);
    }
    const Json blocks = content->is_string() ? Json::array({Json{{"type", "text"}, {"text", *content}}}) : *content;
    if (role == "user") {
      if (auto e = read_user(blocks, i, conversation)) return e;
    } else if (role == "assistant") {
      if (auto e = read_assistant(blocks, i, conversation)) return e;
    } else {
      return bad_request(path + ".role", path + ".role: expected user or assistant, got '" + role + "'");
    }
  }
  return std::nullopt;
}

std::optional<ApiError> read_tools(const Json& tools, ChatInput& input) {
  for (size_t i = 0; i < tools.size(); ++i) {
    const Json& tool = tools[i];
    const std::string path = "tools[" + std::to_string(i) + "]";
    if (!tool.is_object()) return wrong_type(path, "an object", tool);
    if (const Json* type = find_field(tool, "type"); type && *type != "custom") {
      return bad_request(path + ".type", path + ": server tools are not supported");
    }
    const Json* name = find_field(tool, "name");
    if (name == nullptr || !name->is_string()) return bad_request(path + ".name", path + ".name: expected a string");
    if (auto e = check_string(tool, "description", path)) return e;
    const Json* schema = find_field(tool, "input_schema");
    if (schema == nullptr || !schema->is_object()) {
      return bad_request(path + ".input_schema", path + ".input_schema: expected a JSON Schema object");
    }
    Json function = {{"name", *name}};
    if (const Json* d = find_field(tool, "description")) function["description"] = *d;
    function["parameters"] = *schema;
    input.conversation.tools.push_back(Json{{"type", "function"}, {"function", std::move(function)}});
  }
  return std::nullopt;
}

std::optional<ApiError> read_tool_choice(const Json& body, ChatInput& input) {
  const Json* choice = find_field(body, "tool_choice");
  if (choice == nullptr) return std::nullopt;
  if (!choice->is_object()) return wrong_type("tool_choice", "an object {\"type\": auto|any|tool|none}", *choice);
  const std::string type = choice->value("type", "");
  if (type == "none") {
    input.tool_choice = ToolChoice::kNone;
  } else if (type == "any") {
    input.tool_choice = ToolChoice::kRequired;
  } else if (type == "tool") {
    const Json* name = find_field(*choice, "name");
    if (name == nullptr || !name->is_string()) return bad_request("tool_choice.name", "tool_choice.name: expected a string");
    input.tool_choice = ToolChoice::kRequired;
    input.named_tool = name->get<std::string>();
  } else if (type != "auto") {
    return bad_request("tool_choice.type", "tool_choice.type: expected auto, any, tool or none, got '" + type + "'");
  }
  return std::nullopt;
}

}  // namespace

ParseResult parse_messages(const Json& body, const ModelContext& model) {
  ApiRequest request;
  request.kind = ApiKind::kMessages;
  if (auto e = parse_common(body, request)) return *e;
  if (auto e = read_image_parts(request.kind, body, model, request.images)) return *e;
  const Json* max_tokens = find_field(body, "max_tokens");
  if (max_tokens == nullptr) return bad_request("max_tokens", "max_tokens: Field required");
  if (!max_tokens->is_number_integer()) return wrong_type("max_tokens", "an integer", *max_tokens);
  if (max_tokens->get<int64_t>() < 1) return bad_request("max_tokens", "max_tokens: must be at least 1");
  ChatInput input;
  if (const Json* system = find_field(body, "system")) {
    auto text = read_text_blocks(*system, "system");
    if (auto* e = std::get_if<ApiError>(&text)) return *e;
    input.conversation.messages.push_back(
        Message{Role::kSystem, std::get<std::string>(std::move(text)), std::nullopt, {}, "", false});
  }
  const Json* messages = find_field(body, "messages");
  if (messages == nullptr) return bad_request("messages", "messages: Field required");
  if (!messages->is_array()) return wrong_type("messages", "a list", *messages);
  if (messages->empty()) return bad_request("messages", "messages: at least one message is required");
  if (auto e = read_messages(*messages, input.conversation)) return *e;
  if (auto e = check_array(body, "tools", "")) return *e;
  if (const Json* tools = find_field(body, "tools")) {
    if (auto e = read_tools(*tools, input)) return *e;
  }
  if (auto e = read_tool_choice(body, input)) return *e;
  if (auto e = check_object(body, "thinking", "")) return *e;
  if (const Json* thinking = find_field(body, "thinking")) {
    if (auto e = check_string(*thinking, "type", "thinking")) return *e;
    input.thinking = thinking->value("type", "enabled") != "disabled";
  }
  if (auto e = check_array(body, "stop_sequences", "")) return *e;
  if (const Json* stops = find_field(body, "stop_sequences")) {
    for (size_t i = 0; i < stops->size(); ++i) {
      if (!(*stops)[i].is_string() || (*stops)[i].get<std::string>().empty()) {
        return bad_request("stop_sequences", "stop_sequences[" + std::to_string(i) + "]: expected a non-empty string");
      }
    }
    input.sampling_fields["stop"] = *stops;
  }
  for (const char* key : {"max_tokens", "temperature", "top_p", "top_k"}) {
    if (const Json* v = find_field(body, key)) input.sampling_fields[key] = *v;
  }
  return finish_chat_request(std::move(request), std::move(input), model);
}

}  // namespace deepinfer::api
