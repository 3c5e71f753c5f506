// Typed JSON field reads with errors that name the file and the field.
#include "weights/json_fields.h"

#include <cmath>

namespace deepinfer {
namespace {

using nlohmann::json;

// Integers; a float with an integral value (4096.0) is the same number to a Python writer.
std::optional<int64_t> find_int(const json& value) {
  if (value.is_number_unsigned()) {
    const auto v = value.get<uint64_t>();
    if (v > static_cast<uint64_t>(INT64_MAX)) return std::nullopt;
    return static_cast<int64_t>(v);
  }
  if (value.is_number_integer()) return value.get<int64_t>();
  if (value.is_number_float()) {
    const double v = value.get<double>();
    if (std::isfinite(v) && v == std::trunc(v) && std::fabs(v) < 9.0e15) return static_cast<int64_t>(v);
  }
  return std::nullopt;
}

}  // namespace

std::string brief_json(const json& value) {
  std::string text = value.dump();
  if (text.size() > 60) text = text.substr(0, 57) + "...";
  return text;
}

JsonFields::JsonFields(std::string source, const json& object, std::string prefix) : source_(std::move(source)) {
  layers_.push_back({&object, std::move(prefix)});
}

void JsonFields::add_fallback(const json& object, std::string prefix) {
  layers_.push_back({&object, std::move(prefix)});
}

void JsonFields::add_fallback(const JsonFields& other) {
  layers_.insert(layers_.end(), other.layers_.begin(), other.layers_.end());
}

const JsonFields::Layer* JsonFields::find_layer(std::string_view key) const {
  for (const Layer& layer : layers_) {
    if (!layer.object->is_object()) continue;
    const auto it = layer.object->find(key);
    if (it != layer.object->end() && !it->is_null()) return &layer;
  }
  return nullptr;
}

const json* JsonFields::find(std::string_view key) const {
  const Layer* layer = find_layer(key);
  return layer == nullptr ? nullptr : &*layer->object->find(key);
}

std::string JsonFields::path(std::string_view key) const {
  const Layer* layer = find_layer(key);
  return (layer == nullptr ? layers_.front().prefix : layer->prefix) + std::string(key);
}

Error JsonFields::invalid(std::string_view key, std::string_view expected, const json& got) const {
  return Error{source_ + ": field '" + path(key) + "' must be " + std::string(expected) + ", got " + brief_json(got)};
}

Error JsonFields::missing(std::string_view key) const {
  return Error{source_ + ": field '" + path(key) + "' is missing"};
}

Error JsonFields::error(std::string_view message) const { return Error{source_ + ": " + std::string(message)}; }

Result<std::optional<int64_t>> JsonFields::optional_int(std::string_view key, int64_t min_value,
                                                        std::string_view expected) const {
  const json* value = find(key);
  if (value == nullptr) return std::optional<int64_t>();
  const std::optional<int64_t> number = find_int(*value);
  if (!number || *number < min_value) return invalid(key, expected, *value);
  return number;
}

Result<std::optional<int64_t>> JsonFields::optional_positive_int(std::string_view key) const {
  return optional_int(key, 1, "a positive integer");
}

Result<std::optional<int64_t>> JsonFields::optional_non_negative_int(std::string_view key) const {
  return optional_int(key, 0, "a non-negative integer");
}

Result<int64_t> JsonFields::positive_int(std::string_view key) const {
  if (layers_.front().object->contains(key) && !has(key)) {
    return invalid(key, "a positive integer", *layers_.front().object->find(key));  // explicit null
  }
  Result<std::optional<int64_t>> value = optional_positive_int(key);
  if (!value.ok()) return value.error();
  if (!*value) return missing(key);
  return **value;
}

Result<std::vector<int64_t>> JsonFields::non_negative_int_or_list(std::string_view key) const {
  const json* value = find(key);
  std::vector<int64_t> result;
  if (value == nullptr) return result;
  constexpr std::string_view kExpected = "a non-negative integer or a list of them";
  if (!value->is_array()) {
    const std::optional<int64_t> number = find_int(*value);
    if (!number || *number < 0) return invalid(key, kExpected, *value);
    result.push_back(*number);
    return result;
  }
  for (const json& item : *value) {
    const std::optional<int64_t> number = find_int(item);
    if (!number || *number < 0) return invalid(key, kExpected, *value);
    result.push_back(*number);
  }
  return result;
}

Result<std::optional<double>> JsonFields::optional_number(std::string_view key) const {
  const json* value = find(key);
  if (value == nullptr) return std::optional<double>();
  if (!value->is_number()) return invalid(key, "a number", *value);
  return std::optional<double>(value->get<double>());
}

Result<double> JsonFields::number(std::string_view key, double fallback) const {
  Result<std::optional<double>> value = optional_number(key);
  if (!value.ok()) return value.error();
  return value->value_or(fallback);
}

Result<double> JsonFields::positive_number(std::string_view key, double fallback) const {
  const json* value = find(key);
  if (value == nullptr) return fallback;
  if (!value->is_number() || !(value->get<double>() > 0.0)) return invalid(key, "a positive number", *value);
  return value->get<double>();
}

Result<bool> JsonFields::boolean(std::string_view key, bool fallback) const {
  const json* value = find(key);
  if (value == nullptr) return fallback;
  if (!value->is_boolean()) return invalid(key, "true or false", *value);
  return value->get<bool>();
}

Result<std::optional<std::string>> JsonFields::optional_string(std::string_view key) const {
  const json* value = find(key);
  if (value == nullptr) return std::optional<std::string>();
  if (!value->is_string()) return invalid(key, "a string", *value);
  return std::optional<std::string>(value->get<std::string>());
}

}  // namespace deepinfer
