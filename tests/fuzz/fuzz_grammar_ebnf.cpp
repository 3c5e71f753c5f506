// libFuzzer target: arbitrary bytes as an EBNF grammar. Every input either compiles or returns
// an error; a compiled grammar is then driven over the input's own bytes (grammar_fuzz_driver.h).
#include <cstdint>
#include <string_view>

#include "grammar_fuzz_driver.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace deepinfer::grammar;
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  return drive_fuzzed_grammar(compile_ebnf(text, "root", fuzz_grammar_limits()), text);
}
