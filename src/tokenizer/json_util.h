// simdjson accessors for the tokenizer loader: typed field reads whose errors name the field.
#pragma once

#include <simdjson.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "core/result.h"

namespace deepinfer::tokenizer {

using JsonElement = simdjson::dom::element;
using JsonObject = simdjson::dom::object;

// The field, or nullopt when absent or null.
inline std::optional<JsonElement> json_field(const JsonObject& object, std::string_view name) {
  JsonElement value;
  if (object.at_key(name).get(value) != simdjson::SUCCESS || value.is_null()) return std::nullopt;
  return value;
}

inline Result<JsonObject> json_as_object(const JsonElement& element, const std::string& where) {
  JsonObject object;
  if (element.get_object().get(object) != simdjson::SUCCESS) return Error{where + ": expected a JSON object"};
  return object;
}

inline Result<std::string_view> json_string(const JsonObject& object, std::string_view name, const std::string& where) {
  std::optional<JsonElement> value = json_field(object, name);
  std::string_view text;
  if (!value || value->get_string().get(text) != simdjson::SUCCESS) {
    return Error{where + "." + std::string(name) + ": expected a string"};
  }
  return text;
}

inline Result<bool> json_bool(const JsonObject& object, std::string_view name, bool fallback, const std::string& where) {
  std::optional<JsonElement> value = json_field(object, name);
  if (!value) return fallback;
  bool flag = false;
  if (value->get_bool().get(flag) != simdjson::SUCCESS) return Error{where + "." + std::string(name) + ": expected true or false"};
  return flag;
}

inline Result<int64_t> json_int(const JsonObject& object, std::string_view name, int64_t fallback, const std::string& where) {
  std::optional<JsonElement> value = json_field(object, name);
  if (!value) return fallback;
  int64_t number = 0;
  if (value->get_int64().get(number) != simdjson::SUCCESS) return Error{where + "." + std::string(name) + ": expected an integer"};
  return number;
}

}  // namespace deepinfer::tokenizer
