// Oniguruma-compatible regular expressions on PCRE2 (JIT, UTF + UCP mode): tokenizer.json
// patterns are written for the Oniguruma engine that Hugging Face tokenizers uses.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>

#include "core/result.h"

namespace deepinfer::tokenizer {

struct RegexMatch {
  size_t start = 0;
  size_t end = 0;
};

// Immutable after compile(); find() is thread-safe (per-thread match data and JIT stack).
class Regex {
 public:
  // Translates the Oniguruma spellings that PCRE2 reads differently (\s includes U+0085 there;
  // \h is a hex digit there) and compiles with JIT.
  static Result<Regex> compile(std::string_view pattern);

  // Searches subject (valid UTF-8) from byte offset `from`. Returns false when nothing matches;
  // an error when the engine gives up (a resource limit on pathological input).
  Result<bool> find(std::string_view subject, size_t from, RegexMatch& match) const;

  // Calls fn(start, end) for each match, iterating like Oniguruma's find_iter: after an empty
  // match the search moves one character on. fn may not throw.
  template <typename F>
  Result<void> for_each_match(std::string_view subject, F&& fn) const {
    size_t from = 0;
    size_t last_match_end = SIZE_MAX;
    RegexMatch match;
    while (from <= subject.size()) {
      Result<bool> found = find(subject, from, match);
      if (!found.ok()) return found.error();
      if (!*found) break;
      if (match.start == match.end && match.end == last_match_end) {
        if (from >= subject.size()) break;
        from += next_char_length(subject, from);
        continue;
      }
      fn(match.start, match.end);
      from = match.end;
      last_match_end = match.end;
    }
    return {};
  }

  const std::string& pattern() const { return pattern_; }

 private:
  static size_t next_char_length(std::string_view subject, size_t pos);
  struct Compiled;
  std::shared_ptr<const Compiled> compiled_;
  std::string pattern_;
};

// Replaces every non-overlapping match of `regex` in text with `content`.
Result<std::string> regex_replace_all(const Regex& regex, std::string_view text, std::string_view content);

}  // namespace deepinfer::tokenizer
