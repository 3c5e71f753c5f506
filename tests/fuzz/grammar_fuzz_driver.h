// The part both grammar fuzz targets share: the limits a fuzzed grammar compiles under, and driving
// a compiled grammar over the input's own bytes, which must never crash or hang (the automaton's
// state and item limits bound the work).
#pragma once

#include <cstdint>
#include <memory>
#include <string_view>

#include "grammar/front_ends.h"
#include "grammar/matcher.h"

namespace deepinfer::grammar {

inline GrammarLimits fuzz_grammar_limits() {
  GrammarLimits limits;
  limits.max_symbols = 200'000;
  limits.max_repeat = 1'000;
  return limits;
}

// Compiles grammar (when the front end accepted the input) over a 4-token vocabulary and feeds it
// the first 64 bytes of text one at a time, filling the token mask before each.
template <typename CompiledFrontEnd>
int drive_fuzzed_grammar(CompiledFrontEnd grammar, std::string_view text) {
  if (!grammar.ok()) return 0;
  static const auto vocab = std::make_shared<TokenVocab>(std::vector<std::string>{"a", "(", "\"", "xy"},
                                                         std::vector<int32_t>{}, 4);
  auto compiled = compile_grammar(std::move(grammar).value(), vocab);
  if (!compiled.ok()) return 0;
  GrammarMatcher matcher(*compiled);
  uint32_t mask[1];
  for (size_t i = 0; i < text.size() && i < 64; ++i) {
    matcher.fill_next_token_bitmask(mask);
    if (!matcher.accept_bytes(text.substr(i, 1))) break;
  }
  return 0;
}

}  // namespace deepinfer::grammar
