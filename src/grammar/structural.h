// The structural front end: fixed markup (text and added tokens), free text kept from containing
// given markers, and JSON Schema values, composed into one grammar. Tool calls in each chat
// family's own markup are built with it (recipe/tool_call_grammar.h).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "core/result.h"
#include "grammar/front_ends.h"
#include "grammar/grammar.h"

namespace deepinfer::grammar {

// spec_json is one node:
//   "text"                                   these bytes (UTF-8)
//   {"token": ID}                            the added token ID itself (special_token_bytes), never
//                                            its text spelled with ordinary tokens
//   {"text_without": ["m", ...],             any UTF-8 text, possibly empty, in which no marker
//    "not_first": "chars"}                   occurs, and whose first character is not in not_first
//   {"json_schema": {...}, "lenient": bool}  a value of the schema (lenient: drops what cannot be
//                                            enforced, with warnings)
//   {"json_object": true}                    any JSON object
//   {"seq": [nodes]}  {"any": [nodes]}  {"optional": node}
// json_options gives the JSON whitespace and property rules (lenient is per node). Errors name
// the node by its JSON pointer.
Result<Grammar> compile_structural(std::string_view spec_json, const JsonSchemaOptions& json_options,
                                   std::vector<std::string>* warnings = nullptr, GrammarLimits limits = {});

// Copies grammar's rules into builder; returns the symbol of its root.
Symbol import_grammar(GrammarBuilder& builder, const Grammar& grammar, const std::string& name_prefix);

// Text in which none of markers occurs (an Aho-Corasick automaton over code points, as a
// left-linear grammar so that Earley item sets stay bounded); not_first: code points the text may
// not start with. Errors: a marker that is empty or not UTF-8.
Result<Symbol> build_text_without(GrammarBuilder& builder, const std::vector<std::string>& markers,
                                  std::string_view not_first);

}  // namespace deepinfer::grammar
