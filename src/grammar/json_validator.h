// A JSON Schema validator for concrete values. The JSON Schema front end runs the finite value
// sets of enum/const through it, so keywords a grammar cannot express (not, if, uniqueItems,
// patternProperties, ...) are still enforced exactly on them, and tests key names against
// patternProperties with it.
#pragma once

#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <regex>
#include <string>

namespace deepinfer::grammar {

// The target of a local "#/a/b" JSON pointer (~0, ~1 and %XX decoded) in root; nullptr when
// the reference is not local or points at nothing.
const nlohmann::ordered_json* resolve_pointer(const nlohmann::ordered_json& root, const std::string& target);

// JSON Schema equality: numbers by value (1 == 1.0), objects regardless of key order.
bool json_equal(const nlohmann::ordered_json& a, const nlohmann::ordered_json& b);

class SchemaValidator {
 public:
  enum class Verdict { kInvalid, kValid, kUnknown };

  explicit SchemaValidator(const nlohmann::ordered_json& root) : root_(root) {}

  // Whether value satisfies schema (found at pointer, for messages). kUnknown when the verdict
  // depends on a keyword this validator cannot evaluate; unknown() then names it.
  Verdict validate(const nlohmann::ordered_json& schema, const nlohmann::ordered_json& value, const std::string& pointer);
  const std::string& unknown() const { return unknown_; }

  // Whether text contains a match of the ECMAScript pattern (JSON Schema's `pattern`, which is
  // not anchored); nullopt when std::regex cannot parse the pattern.
  std::optional<bool> search(const std::string& pattern, const std::string& text);

 private:
  Verdict check(const nlohmann::ordered_json& s, const nlohmann::ordered_json& v, const std::string& pointer, int depth);
  Verdict check_object(const nlohmann::ordered_json& s, const nlohmann::ordered_json& v, const std::string& pointer,
                       int depth);
  Verdict check_array(const nlohmann::ordered_json& s, const nlohmann::ordered_json& v, const std::string& pointer,
                      int depth);
  Verdict check_string(const nlohmann::ordered_json& s, const std::string& text, const std::string& pointer);
  Verdict check_number(const nlohmann::ordered_json& s, const nlohmann::ordered_json& v, const std::string& pointer);
  Verdict give_up(const std::string& what, const std::string& pointer);

  const nlohmann::ordered_json& root_;
  std::string unknown_;
  std::map<std::string, std::shared_ptr<std::wregex>> regexes_;  // nullptr: not a valid regex
};

}  // namespace deepinfer::grammar
