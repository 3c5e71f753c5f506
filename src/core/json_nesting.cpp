#include "core/json_nesting.h"

#include <algorithm>

namespace deepinfer {

int64_t json_nesting_depth(std::string_view text) {
  int64_t depth = 0;
  int64_t deepest = 0;
  bool in_string = false;
  bool escaped = false;
  for (const char c : text) {
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (c == '\\') {
        escaped = true;
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      deepest = std::max(deepest, ++depth);
    } else if (c == ']' || c == '}') {
      depth = std::max<int64_t>(0, depth - 1);
    }
  }
  return deepest;
}

}  // namespace deepinfer
