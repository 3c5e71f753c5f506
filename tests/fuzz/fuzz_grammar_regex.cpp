// libFuzzer target: arbitrary bytes as a regular expression (JSON Schema `pattern` syntax). Every
// input either compiles or returns an error; a compiled grammar is then driven over the input's
// own bytes, which must never crash or hang (the automaton's state and item limits bound the work).
#include <cstdint>
#include <memory>
#include <string_view>

#include "grammar/front_ends.h"
#include "grammar/matcher.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace deepinfer::grammar;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  GrammarLimits limits;
  limits.max_symbols = 200'000;
  limits.max_repeat = 1'000;
  auto grammar = compile_regex(text, limits);
  if (!grammar.ok()) return 0;
  static const auto vocab = std::make_shared<TokenVocab>(std::vector<std::string>{"a", "(", "\"", "xy"},
                                                         std::vector<int32_t>{}, 4);
  auto compiled = compile_grammar(std::move(grammar).value(), vocab);
  if (!compiled.ok()) return 0;
  GrammarMatcher matcher(*compiled);
  uint32_t mask[1];
  for (size_t i = 0; i < size && i < 64; ++i) {
    matcher.fill_next_token_bitmask(mask);
    if (!matcher.accept_bytes(text.substr(i, 1))) break;
  }
  return 0;
}
