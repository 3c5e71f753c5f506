// OpenAI Responses request bodies (input items, instructions, flat function tools, reasoning,
// max_output_tokens, text.format) -> ApiRequest.
#include "recipe/api_request_internal.h"

namespace deepinfer::api {
namespace {

std::string item_path(size_t i) { return "input[" + std::to_string(i) + "]"; }

// A string, or a list of input_text / output_text parts, joined with "\n\n". With parts given,
// input_image parts (their bytes read by read_image_parts) are taken too: parts gets every part,
// an image as empty text, and images the images' indexes in it.
std::variant<std::string, ApiError> read_parts(const Json& content, const std::string& path,
                                               std::vector<std::string>* parts = nullptr,
                                               std::vector<size_t>* images = nullptr) {
  if (content.is_string()) return content.get<std::string>();
  if (!content.is_array()) return wrong_type(path, "a string or a list of content parts", content);
  std::string text;
  for (size_t j = 0; j < content.size(); ++j) {
    const Json& part = content[j];
    const std::string part_path = path + "[" + std::to_string(j) + "]";
    if (!part.is_object()) return wrong_type(part_path, "an object", part);
    const std::string type = part.value("type", "");
    if (parts != nullptr && type == "input_image") {
      images->push_back(parts->size());
      parts->emplace_back();
      continue;
    }
    if (type != "input_text" && type != "output_text" && type != "text" && type != "reasoning_text" &&
        type != "summary_text") {
      return bad_request(part_path + ".type", part_path + ".type: only text parts are supported, got '" + type + "'");
    }
    const Json* t = find_field(part, "text");
    if (t == nullptr || !t->is_string()) return bad_request(part_path + ".text", part_path + ".text: expected a string");
    if (!text.empty()) text += "\n\n";
    text += t->get<std::string>();
    if (parts != nullptr) parts->push_back(t->get<std::string>());
  }
  return text;
}

// Input items -> messages. Calls join the assistant message before them (one turn); reasoning
// items wait for the assistant message that follows them.
std::optional<ApiError> read_items(const Json& items, Conversation& conversation) {
  std::optional<std::string> pending_reasoning;
  const auto assistant_for_call = [&]() -> Message& {
    if (conversation.messages.empty() || conversation.messages.back().role != Role::kAssistant) {
      conversation.messages.push_back(Message{Role::kAssistant, std::nullopt, std::nullopt, {}, "", false});
    }
    Message& m = conversation.messages.back();
    if (pending_reasoning) m.reasoning_content = std::exchange(pending_reasoning, std::nullopt);
    return m;
  };
  for (size_t i = 0; i < items.size(); ++i) {
    const Json& item = items[i];
    const std::string path = item_path(i);
    if (!item.is_object()) return wrong_type(path, "an object", item);
    if (auto e = check_string(item, "type", path)) return e;
    const std::string type = item.value("type", "message");
    if (type == "message") {
      if (auto e = check_string(item, "role", path)) return e;
      const std::string role = item.value("role", "");
      const Json* content = find_field(item, "content");
      if (content == nullptr) return bad_request(path + ".content", path + ".content: missing");
      Message m;
      auto text = read_parts(*content, path + ".content", &m.content_parts, &m.image_parts);
      if (auto* e = std::get_if<ApiError>(&text)) return *e;
      m.content = std::get<std::string>(std::move(text));
      if (m.image_parts.empty()) m.content_parts.clear();  // as a string: only image turns keep parts
      if (role == "user") {
        m.role = Role::kUser;
      } else if (role == "system" || role == "developer") {
        m.role = Role::kSystem;
      } else if (role == "assistant") {
        m.role = Role::kAssistant;
        if (pending_reasoning) m.reasoning_content = std::exchange(pending_reasoning, std::nullopt);
      } else {
        return bad_request(path + ".role", path + ".role: expected user, assistant, system or developer, got '" +
                                               role + "'");
      }
      conversation.messages.push_back(std::move(m));
    } else if (type == "function_call") {
      for (const char* key : {"call_id", "name", "arguments"}) {
        const Json* v = find_field(item, key);
        if (v == nullptr || !v->is_string()) {
          return bad_request(path + "." + key, path + "." + key + ": expected a string");
        }
      }
      assistant_for_call().tool_calls.push_back(
          ToolCall{item["call_id"].get<std::string>(), item["name"].get<std::string>(),
                   item["arguments"].get<std::string>()});
    } else if (type == "function_call_output") {
      if (auto e = check_string(item, "call_id", path)) return e;
      const Json* output = find_field(item, "output");
      if (output == nullptr) return bad_request(path + ".output", path + ".output: missing");
      auto text = read_parts(*output, path + ".output");
      if (auto* e = std::get_if<ApiError>(&text)) return *e;
      Message m;
      m.role = Role::kTool;
      m.content = std::get<std::string>(std::move(text));
      m.tool_call_id = item.value("call_id", "");
      conversation.messages.push_back(std::move(m));
    } else if (type == "reasoning") {
      const Json* parts = find_field(item, "content");
      if (parts == nullptr || (parts->is_array() && parts->empty())) parts = find_field(item, "summary");
      if (parts == nullptr) continue;
      auto text = read_parts(*parts, path + ".content");
      if (auto* e = std::get_if<ApiError>(&text)) return *e;
      pending_reasoning = std::get<std::string>(std::move(text));
    }
    // Other item types (item_reference, web_search_call, ...) carry nothing to render.
  }
  return std::nullopt;
}

// Flat {"type": "function", "name", "description", "parameters"} -> the chat tool shape.
std::optional<ApiError> read_tools(const Json& tools, Conversation& conversation) {
  for (size_t i = 0; i < tools.size(); ++i) {
    const Json& tool = tools[i];
    const std::string path = "tools[" + std::to_string(i) + "]";
    if (!tool.is_object()) return wrong_type(path, "an object", tool);
    const std::string type = tool.value("type", "function");
    if (type.starts_with("web_search")) continue;
    if (type != "function") {
      return bad_request(path + ".type", path + ".type: only function tools are supported, got '" + type + "'");
    }
    const Json* name = find_field(tool, "name");
    if (name == nullptr || !name->is_string()) return bad_request(path + ".name", path + ".name: expected a string");
    if (auto e = check_string(tool, "description", path)) return e;
    if (auto e = check_object(tool, "parameters", path)) return e;
    Json function = {{"name", *name}};
    if (const Json* d = find_field(tool, "description")) function["description"] = *d;
    function["parameters"] = tool.contains("parameters") && tool["parameters"].is_object() ? tool["parameters"]
                                                                                          : Json::object();
    conversation.tools.push_back(Json{{"type", "function"}, {"function", std::move(function)}});
  }
  return std::nullopt;
}

std::optional<ApiError> read_tool_choice(const Json& body, ChatInput& input) {
  const Json* choice = find_field(body, "tool_choice");
  if (choice == nullptr) return std::nullopt;
  if (choice->is_string()) {
    const std::string& s = choice->get_ref<const std::string&>();
    if (s == "none") input.tool_choice = ToolChoice::kNone;
    else if (s == "required") input.tool_choice = ToolChoice::kRequired;
    else if (s != "auto") return bad_request("tool_choice", "tool_choice: expected none, auto or required, got '" + s + "'");
    return std::nullopt;
  }
  if (!choice->is_object() || !choice->contains("name") || !(*choice)["name"].is_string()) {
    return bad_request("tool_choice", "tool_choice: expected none, auto, required or {\"type\": \"function\", \"name\": ...}");
  }
  input.tool_choice = ToolChoice::kRequired;
  input.named_tool = (*choice)["name"].get<std::string>();
  return std::nullopt;
}

}  // namespace

ParseResult parse_responses(const Json& body, const ModelContext& model) {
  ApiRequest request;
  request.kind = ApiKind::kResponses;
  if (auto e = parse_common(body, request)) return *e;
  if (auto e = read_image_parts(request.kind, body, model, request.images)) return *e;
  if (find_field(body, "previous_response_id") != nullptr) {
    return bad_request("previous_response_id",
                       "previous_response_id: this server stores no responses; send the whole conversation in input");
  }
  ChatInput input;
  input.prompt_field = "input";
  input.max_tokens_field = "max_output_tokens";
  if (auto e = check_string(body, "instructions", "")) return *e;
  if (const Json* instructions = find_field(body, "instructions"); instructions && !instructions->get<std::string>().empty()) {
    input.conversation.messages.push_back(Message{Role::kSystem, instructions->get<std::string>(), std::nullopt, {}, "", false});
  }
  const Json* items = find_field(body, "input");
  if (items == nullptr && input.conversation.messages.empty()) {
    return bad_request("input", "input: missing (give input or instructions)");
  }
  if (items != nullptr) {
    if (items->is_string()) {
      input.conversation.messages.push_back(Message{Role::kUser, items->get<std::string>(), std::nullopt, {}, "", false});
    } else if (items->is_array()) {
      if (auto e = read_items(*items, input.conversation)) return *e;
    } else {
      return wrong_type("input", "a string or a list of items", *items);
    }
  }
  if (auto e = check_array(body, "tools", "")) return *e;
  if (const Json* tools = find_field(body, "tools")) {
    if (auto e = read_tools(*tools, input.conversation)) return *e;
  }
  if (auto e = read_tool_choice(body, input)) return *e;
  if (auto e = check_object(body, "reasoning", "")) return *e;
  if (const Json* reasoning = find_field(body, "reasoning")) {
    if (auto e = check_string(*reasoning, "effort", "reasoning")) return *e;
    if (const Json* effort = find_field(*reasoning, "effort")) input.effort = effort->get<std::string>();
  }
  if (auto e = check_object(body, "text", "")) return *e;
  if (const Json* text = find_field(body, "text")) {
    if (auto e = check_object(*text, "format", "text")) return *e;
    if (const Json* format = find_field(*text, "format")) {
      if (auto e = check_string(*format, "type", "text.format")) return *e;
      const Json* type = find_field(*format, "type");
      if (type != nullptr && type->get_ref<const std::string&>() != "text") {
        request.structured_output = Json{{"text.format", *format}};
      }
    }
  }
  for (const auto& [from, to] : std::initializer_list<std::pair<const char*, const char*>>{
           {"max_output_tokens", "max_tokens"}, {"temperature", "temperature"}, {"top_p", "top_p"},
           {"top_k", "top_k"}, {"seed", "seed"}, {"top_logprobs", "top_logprobs"}, {"text", "text"},
           {"guided_json", "guided_json"}, {"guided_regex", "guided_regex"}, {"guided_grammar", "guided_grammar"},
           {"guided_choice", "guided_choice"}, {"structured_outputs_lenient", "structured_outputs_lenient"}}) {
    if (const Json* v = find_field(body, from)) input.sampling_fields[to] = *v;
  }
  for (const char* key : {"instructions", "max_output_tokens", "temperature", "top_p", "tools", "tool_choice",
                          "parallel_tool_calls", "reasoning", "text", "metadata", "user", "store", "truncation"}) {
    if (const Json* v = find_field(body, key)) request.echo_fields[key] = *v;
  }
  auto result = finish_chat_request(std::move(request), std::move(input), model);
  if (auto* e = std::get_if<ApiError>(&result); e && e->param == "max_tokens") e->param = "max_output_tokens";
  return result;
}

}  // namespace deepinfer::api
