// An OpenAI-style chat conversation (messages + tool definitions), the input of prompt rendering,
// parsed from the request JSON with errors that name the offending field.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "core/result.h"

namespace deepinfer {

enum class Role { kSystem, kUser, kAssistant, kTool };

// A call to a "function" tool (the only kind OpenAI's chat format has).
struct ToolCall {
  std::string id;
  std::string name;
  std::string arguments;  // the JSON text exactly as the client sent it
};

struct Message {
  Role role = Role::kUser;
  // nullopt where the client sent null or nothing (only assistants with tool calls may); some
  // templates branch on "content is none", so it is kept apart from "".
  std::optional<std::string> content;
  std::optional<std::string> reasoning_content;  // assistant history only
  std::vector<ToolCall> tool_calls;              // assistant only; empty: no tool_calls key
  std::string tool_call_id;                      // tool only
  bool prefix = false;                           // DeepSeek prefix completion: the last assistant message is continued
  // The text parts when content came as a list (content holds them joined), for the templates
  // that read the parts one by one (Gemma 3); empty when content was a string.
  std::vector<std::string> content_parts = {};
  // Which of content_parts are images (their text empty, left out of content), in order: where
  // a template that places images puts each one's tokens.
  std::vector<size_t> image_parts = {};
};

struct Conversation {
  std::vector<Message> messages;
  // OpenAI tool objects ({"type": "function", "function": {name, description, parameters}}) kept
  // as sent, key order included, because templates print them as JSON.
  std::vector<nlohmann::ordered_json> tools;
};

// Parses {"messages": [...], "tools": [...]} (OpenAI Chat Completions). Content may be a string or
// a list of text parts (joined with "\n\n") and image parts ("image_url", or "image" as Hugging
// Face's templates take them: Message::image_parts); the "developer" role is read as "system"; tool_calls
// null is read as absent. Errors name the field, e.g. "messages[2].tool_calls[0].function.name".
Result<Conversation> parse_conversation(const nlohmann::ordered_json& request);

// "system", "user", "assistant", "tool": the role's name as templates print it.
const char* role_name(Role role);

}  // namespace deepinfer
