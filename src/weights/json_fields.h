// Internal to weights/: typed reads of a JSON object's fields whose errors name the file and
// the field ("config.json: field 'hidden_size' must be a positive integer, got \"abc\"").
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/result.h"

namespace deepinfer {

// A JSON value as text for an error message, cut to about 60 characters.
std::string brief_json(const nlohmann::json& value);

// Reads fields from one or more JSON objects (layers), the first layer that has a field winning;
// null counts as absent. Holds pointers: the objects must outlive it. Errors name the field by
// its path in the file, e.g. "text_config.hidden_size".
class JsonFields {
 public:
  JsonFields(std::string source, const nlohmann::json& object, std::string prefix = "");
  // Adds a layer consulted when the earlier ones lack a field.
  void add_fallback(const nlohmann::json& object, std::string prefix);
  // Adds every layer of other (same source), consulted after this one's.
  void add_fallback(const JsonFields& other);

  // The field's value, or nullptr when absent or null.
  const nlohmann::json* find(std::string_view key) const;
  bool has(std::string_view key) const { return find(key) != nullptr; }
  // Where a field is (or would be) in the file, for messages: "rope_scaling.factor".
  std::string path(std::string_view key) const;

  Result<int64_t> positive_int(std::string_view key) const;  // required
  Result<std::optional<int64_t>> optional_positive_int(std::string_view key) const;
  Result<std::optional<int64_t>> optional_non_negative_int(std::string_view key) const;
  Result<std::vector<int64_t>> non_negative_int_or_list(std::string_view key) const;  // [] when absent
  Result<double> positive_number(std::string_view key, double fallback) const;
  Result<std::optional<double>> optional_number(std::string_view key) const;
  Result<double> number(std::string_view key, double fallback) const;
  Result<bool> boolean(std::string_view key, bool fallback) const;
  Result<std::optional<std::string>> optional_string(std::string_view key) const;

  // "<source>: field '<path>' must be <expected>, got <value>".
  Error invalid(std::string_view key, std::string_view expected, const nlohmann::json& got) const;
  // "<source>: field '<path>' is missing".
  Error missing(std::string_view key) const;
  // "<source>: <message>", for errors about several fields.
  Error error(std::string_view message) const;

 private:
  struct Layer {
    const nlohmann::json* object;
    std::string prefix;
  };
  const Layer* find_layer(std::string_view key) const;
  Result<std::optional<int64_t>> optional_int(std::string_view key, int64_t min_value, std::string_view expected) const;

  std::string source_;
  std::vector<Layer> layers_;
};

}  // namespace deepinfer
