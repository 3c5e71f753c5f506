// A JSON Schema validator for concrete values. The JSON Schema front end runs the finite value
// sets of enum/const through it, so keywords a grammar cannot express (not, if, uniqueItems,
// patternProperties, ...) are still enforced exactly on them, and tests key names against
// patternProperties with it.
#pragma once

#include <map>
#include <nlohmann/json.hpp>
#include <string>

#include "core/result.h"
#include "grammar/grammar.h"
#include "grammar/nfa.h"

namespace deepinfer::grammar {

// The target of a local "#/a/b" JSON pointer (~0, ~1 and %XX decoded) in root; nullptr when
// the reference is not local or points at nothing.
const nlohmann::ordered_json* resolve_pointer(const nlohmann::ordered_json& root, const std::string& target);

// JSON Schema equality: numbers by value (1 == 1.0), objects regardless of key order.
bool json_equal(const nlohmann::ordered_json& a, const nlohmann::ordered_json& b);

class SchemaValidator {
 public:
  enum class Verdict { kInvalid, kValid, kUnknown };

  // limits bound the patterns' grammars (budget, deadline, cancellation of the compile).
  SchemaValidator(const nlohmann::ordered_json& root, GrammarLimits limits) : root_(root), limits_(limits) {}

  // Whether value satisfies schema (found at pointer, for messages). kUnknown when the verdict
  // depends on a keyword this validator cannot evaluate; unknown() then names it.
  Verdict validate(const nlohmann::ordered_json& schema, const nlohmann::ordered_json& value, const std::string& pointer);
  const std::string& unknown() const { return unknown_; }

  // Whether text contains a match of the pattern (JSON Schema's `pattern`, not anchored), read
  // by the regex front end as the grammar reads it and run as an NFA (nfa.h): time linear in the
  // text, whatever the pattern. Errors: the front end rejects the pattern (lookarounds,
  // backreferences, ...), its NFA is too large, or the limits' deadline or cancellation.
  Result<bool> search(const std::string& pattern, const std::string& text);

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
  GrammarLimits limits_;
  std::string unknown_;
  std::map<std::string, Result<Nfa>> patterns_;  // built on first use
};

}  // namespace deepinfer::grammar
