// Private to the JSON Schema front end: the compiler object shared by json_schema.cpp
// (schemas, objects, arrays, $ref, combinators) and json_values.cpp (strings, numbers, any).
#pragma once

#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "grammar/front_ends.h"
#include "grammar/grammar.h"

namespace deepinfer::grammar {

using Json = nlohmann::ordered_json;

// A key as a JSON pointer token (~ and / escaped).
inline std::string escape_pointer(const std::string& key) {
  std::string out;
  for (char c : key) {
    if (c == '~') out += "~0";
    else if (c == '/') out += "~1";
    else out += c;
  }
  return out;
}

class JsonSchemaCompiler {
 public:
  JsonSchemaCompiler(const JsonSchemaOptions& options, GrammarLimits limits, std::vector<std::string>* warnings)
      : b_(limits), options_(options), warnings_(warnings) {}

  Result<Grammar> compile_document(const Json& root);
  Result<Grammar> compile_object_mode();

  // json_schema.cpp
  Symbol schema(const Json& s, const std::string& pointer, int depth);

 private:
  Symbol schema_of_type(const Json& s, const std::string& type, const std::string& pointer, int depth);
  Symbol object(const Json& s, const std::string& pointer, int depth);
  Symbol array(const Json& s, const std::string& pointer, int depth);
  Symbol ref(const std::string& target, const std::string& pointer, int depth);
  Symbol alternatives(const Json& s, const std::string& keyword, const std::string& pointer, int depth);
  // s with its allOf folded in and $refs at the top resolved; nullopt after a failure.
  std::optional<Json> flatten(const Json& s, const std::string& pointer, int depth);
  bool merge_into(Json& target, const Json& source, const std::string& pointer);
  const Json* resolve(const std::string& target);
  bool check_keywords(const Json& s, const std::string& pointer);
  void unsupported(const std::string& what, const std::string& pointer);

  // json_values.cpp
  Symbol string(const Json& s, const std::string& pointer);
  Symbol integer(const Json& s, const std::string& pointer);
  Symbol number(const Json& s, const std::string& pointer);
  Symbol literal_value(const Json& value);
  Symbol any_value();
  Symbol any_object();
  Symbol json_char();
  Symbol ws();
  Symbol quoted(Symbol body);
  Symbol string_excluding(const std::vector<std::string>& keys);
  Symbol int_range(std::optional<int64_t> lo, std::optional<int64_t> hi, const std::string& pointer);
  std::vector<Sequence> nonneg_range(uint64_t lo, std::optional<uint64_t> hi);

  GrammarBuilder b_;
  JsonSchemaOptions options_;
  std::vector<std::string>* warnings_;
  const Json* root_ = nullptr;
  std::map<std::string, int32_t> ref_rules_;
  std::optional<Symbol> any_value_, any_object_, json_char_, ws_, any_string_, number_;
};

}  // namespace deepinfer::grammar
