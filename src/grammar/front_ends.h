// The front ends that turn user text into a Grammar: EBNF (GBNF style, see
// docs/structured_output.md), regular expressions (the ECMAScript subset of JSON Schema's
// `pattern`), JSON Schema, and fixed choices.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "core/result.h"
#include "grammar/grammar.h"

namespace deepinfer::grammar {

// EBNF text whose start rule is root_rule.
Result<Grammar> compile_ebnf(std::string_view text, std::string_view root_rule = "root", GrammarLimits limits = {});

// A regular expression matched against the whole output (anchors are implied).
Result<Grammar> compile_regex(std::string_view pattern, GrammarLimits limits = {});

// A JSON Schema `pattern` as a search over raw UTF-8 text: every text that contains a match
// (`.*` is implied on a side without an anchor). Run through the automaton, a check takes time
// linear in the text whatever the pattern (no backtracking).
Result<Grammar> compile_regex_search(std::string_view pattern, GrammarLimits limits = {});

// Exactly one of the given strings.
Result<Grammar> compile_choice(const std::vector<std::string>& choices, GrammarLimits limits = {});

struct JsonSchemaOptions {
  // Whitespace bytes allowed between JSON tokens: 0 gives compact JSON ({"a":1,"b":[2]}).
  int max_whitespace = 0;
  // Objects that declare `properties` but no `additionalProperties` allow no other keys (as in
  // OpenAI's strict mode and xgrammar); false follows JSON Schema's default (any other key).
  bool strict_properties = true;
  // Drop unsupported keywords with a warning instead of failing.
  bool lenient = false;
};

// JSON Schema (draft 2020-12 and draft-07 spellings) as text. Every keyword is either enforced
// exactly or, unless lenient, an error naming the keyword and its JSON pointer; warnings
// receives the keywords dropped in lenient mode.
Result<Grammar> compile_json_schema(std::string_view schema_json, const JsonSchemaOptions& options,
                                    std::vector<std::string>* warnings = nullptr, GrammarLimits limits = {});

// Any JSON value whose top level is an object (OpenAI's json_object mode).
Result<Grammar> compile_json_object(const JsonSchemaOptions& options, GrammarLimits limits = {});

// Regex support shared with the JSON Schema front end: parses pattern into builder and
// returns its symbol. json_string: the text is the content of a JSON string (a schema
// `pattern`, so unanchored), with `"`, `\` and control characters in their JSON-escaped form.
Result<Symbol> build_regex(GrammarBuilder& builder, std::string_view pattern, bool json_string);

// One character of JSON string content from ranges (or outside them when negated): raw UTF-8,
// or the canonical escape for '"', '\\' and control characters.
Symbol build_json_char(GrammarBuilder& builder, std::vector<CodepointRange> ranges, bool negated);

}  // namespace deepinfer::grammar
