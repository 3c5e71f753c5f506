// Private to the JSON Schema front end: the compiler object shared by json_schema.cpp ($ref,
// allOf, anyOf / oneOf, enum / const), json_schema_merge.cpp (allOf merging, `not`),
// json_objects.cpp (objects, arrays), json_values.cpp (strings, integers, any) and
// json_numbers.cpp (numbers, multipleOf).
#pragma once

#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "grammar/front_ends.h"
#include "grammar/grammar.h"
#include "grammar/json_validator.h"

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

// Keywords with no meaning for validation (title, description, x-*, ...).
bool is_annotation(const std::string& key);
// The types s allows ("integer" included when "number" is); all seven without `type`.
std::set<std::string> type_set(const Json& s);

// Anchored regexes (JSON string content) that accept only valid values of each known format.
const std::map<std::string, std::string>& json_format_patterns();

// An internal keyword the front end adds to a flattened schema: names an object must not have
// (from `not: {required: [name]}`).
inline constexpr const char* kForbiddenKeys = "$deepinfer:forbidden";

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
  bool matches_every_string(const std::string& pattern);
  Symbol array(const Json& s, const std::string& pointer, int depth);
  Symbol ref(const std::string& target, const std::string& pointer, int depth);
  Symbol alternatives(const Json& s, const std::string& keyword, const std::string& pointer, int depth);
  // The enum/const values of s or of a part of its allOf / $ref chain; nullopt when it has none.
  std::optional<std::vector<Json>> finite_values_of(const Json& s, int depth);
  // Those values that satisfy all of s (checked by the validator), as literals.
  Symbol finite(const Json& s, const std::vector<Json>& values, const std::string& pointer);
  bool disjoint(const Json& a, const Json& b, int depth);
  bool disjoint_patterns(const Json& a, const Json& b);
  std::optional<std::vector<Json>> branch_values(const Json& s, int depth);
  std::set<std::string> branch_types(const Json& s, int depth);

  // json_schema_merge.cpp
  // s with its allOf folded in, $refs at the top resolved and `not` turned into positive
  // keywords; nullopt after a failure.
  std::optional<Json> flatten(const Json& s, const std::string& pointer, int depth);
  bool merge_into(Json& target, const Json& source, const std::string& pointer);
  // Rewrites target["not"] into keywords the grammar enforces; false after a failure.
  bool absorb_not(Json& target, const Json& negated, const std::string& pointer, int depth);
  const Json* resolve(const std::string& target);
  bool check_keywords(const Json& s, const std::string& pointer);
  void unsupported(const std::string& what, const std::string& pointer);

  // json_values.cpp
  Symbol string(const Json& s, const std::string& pointer);
  // pattern with minLength / maxLength folded in, when that is exact; nullopt otherwise.
  std::optional<std::string> fold_lengths(const std::string& pattern, int64_t min, int64_t max);
  Symbol integer(const Json& s, const std::string& pointer);
  Symbol literal_value(const Json& value);
  Symbol any_value();
  Symbol any_object();
  Symbol json_char();
  Symbol ws();
  Symbol quoted(Symbol body);
  Symbol string_excluding(const std::vector<std::string>& keys);
  Symbol int_range(std::optional<int64_t> lo, std::optional<int64_t> hi, const std::string& pointer);
  std::vector<Sequence> nonneg_range(uint64_t lo, std::optional<uint64_t> hi);
  // json_numbers.cpp
  Symbol number(const Json& s, const std::string& pointer);
  // The grammar `multipleOf` imposes; nullopt when it imposes nothing (or was dropped in
  // lenient mode).
  std::optional<Symbol> multiple_of(const Json& s, bool integer, const std::string& pointer);

  GrammarBuilder b_;
  JsonSchemaOptions options_;
  std::vector<std::string>* warnings_;
  const Json* root_ = nullptr;
  std::unique_ptr<SchemaValidator> validator_;
  int ref_merges_ = 0;  // allOf parts merged through a second $ref (a cap against cycles)
  std::map<std::string, int32_t> ref_rules_;
  std::optional<Symbol> any_value_, any_object_, json_char_, ws_, any_string_, number_;
};

}  // namespace deepinfer::grammar
