// Added-token matching on a byte trie (a few hundred short patterns: a trie walk from each
// candidate first byte is as fast as Aho-Corasick here and gives leftmost-longest directly).
#include "tokenizer/added_tokens.h"

#include <algorithm>

#include "tokenizer/unicode.h"
#include "tokenizer/utf8.h"

namespace deepinfer::tokenizer {

namespace {

// Rust regex \w$ on text[..pos]: the last character is a word character.
bool ends_with_word(std::string_view text, size_t pos) {
  if (pos == 0) return false;
  size_t start = pos - 1;
  while (start > 0 && (static_cast<uint8_t>(text[start]) & 0xC0) == 0x80) --start;
  return is_unicode_word_char(next_code_point(text, start));
}

bool starts_with_word(std::string_view text, size_t pos) {
  if (pos >= text.size()) return false;
  return is_unicode_word_char(next_code_point(text, pos));
}

size_t whitespace_run_start(std::string_view text, size_t pos) {
  while (pos > 0) {
    size_t start = pos - 1;
    while (start > 0 && (static_cast<uint8_t>(text[start]) & 0xC0) == 0x80) --start;
    size_t probe = start;
    if (!is_unicode_whitespace(next_code_point(text, probe))) break;
    pos = start;
  }
  return pos;
}

size_t whitespace_run_end(std::string_view text, size_t pos) {
  while (pos < text.size()) {
    size_t next = pos;
    if (!is_unicode_whitespace(next_code_point(text, next))) break;
    pos = next;
  }
  return pos;
}

}  // namespace

AddedTokenMatcher::AddedTokenMatcher(const std::vector<AddedToken>* tokens,
                                     std::vector<std::pair<std::string, int32_t>> patterns)
    : tokens_(tokens) {
  for (const auto& [pattern, token_index] : patterns) {
    if (pattern.empty()) continue;
    int32_t node = 0;
    for (char c : pattern) {
      auto byte = static_cast<uint8_t>(c);
      int32_t child = -1;
      for (const auto& [b, index] : nodes_[node].children)
        if (b == byte) child = index;
      if (child < 0) {
        child = static_cast<int32_t>(nodes_.size());
        nodes_[node].children.emplace_back(byte, child);
        nodes_.emplace_back();
      }
      node = child;
    }
    // The first token listed with a pattern keeps it (Aho-Corasick reports the first pattern).
    if (nodes_[node].token_index < 0) nodes_[node].token_index = token_index;
    first_byte_[static_cast<uint8_t>(pattern[0])] = true;
  }
}

int32_t AddedTokenMatcher::longest_at(std::string_view text, size_t pos, size_t& end) const {
  int32_t node = 0;
  int32_t found = -1;
  for (size_t i = pos; i < text.size(); ++i) {
    auto byte = static_cast<uint8_t>(text[i]);
    int32_t child = -1;
    for (const auto& [b, index] : nodes_[node].children)
      if (b == byte) child = index;
    if (child < 0) break;
    node = child;
    if (nodes_[node].token_index >= 0) {
      found = nodes_[node].token_index;
      end = i + 1;
    }
  }
  return found;
}

void AddedTokenMatcher::split(std::string_view text, std::vector<TextSpan>& spans) const {
  size_t covered = 0;  // text before this is already in spans
  size_t pos = 0;
  while (pos < text.size()) {
    if (!first_byte_[static_cast<uint8_t>(text[pos])]) {
      ++pos;
      continue;
    }
    size_t end = 0;
    int32_t index = longest_at(text, pos, end);
    if (index < 0) {
      ++pos;
      continue;
    }
    const AddedToken& token = (*tokens_)[index];
    size_t start = pos;
    pos = end;  // the search resumes after the match even when the match is discarded
    if (token.single_word && ((start > 0 && ends_with_word(text, start)) || starts_with_word(text, end))) continue;
    if (token.lstrip) start = std::max(whitespace_run_start(text, start), covered);
    if (token.rstrip) end = whitespace_run_end(text, end);
    if (covered < start) spans.push_back({covered, start, -1});
    spans.push_back({start, end, index});
    covered = end;
    pos = end;
  }
  if (covered < text.size()) spans.push_back({covered, text.size(), -1});
}

}  // namespace deepinfer::tokenizer
