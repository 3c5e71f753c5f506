// How deep a JSON text's arrays and objects nest, counted on the raw bytes. nlohmann's parser is
// iterative, but copying, dumping and comparing a parsed document recurse once per level: JSON from
// outside (request bodies, schemas, tool-call arguments, model output) is checked against
// kMaxJsonNesting before it is parsed, so no such recursion can run out of stack.
#pragma once

#include <cstdint>
#include <string_view>

namespace deepinfer {

inline constexpr int64_t kMaxJsonNesting = 512;

// The deepest level of '[' / '{' outside strings (escapes honoured); 0 for a scalar. Malformed
// text gets a number too: the parser reports what is wrong with it.
int64_t json_nesting_depth(std::string_view text);

}  // namespace deepinfer
