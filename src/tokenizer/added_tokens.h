// Added tokens of tokenizer.json and the matcher that finds them in text, with Hugging Face's
// rules: leftmost-longest, then single_word, lstrip and rstrip.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace deepinfer::tokenizer {

struct AddedToken {
  int32_t id = -1;
  std::string content;
  bool special = false;
  bool lstrip = false;
  bool rstrip = false;
  bool normalized = false;
  bool single_word = false;
};

// A stretch of text: an added token (token_index into the matcher's tokens) or plain text (-1).
struct TextSpan {
  size_t start = 0;
  size_t end = 0;
  int32_t token_index = -1;
};

// Immutable after construction; thread-safe.
class AddedTokenMatcher {
 public:
  AddedTokenMatcher() = default;
  // patterns[i] is what token i is matched as (its content, or its normalized content).
  AddedTokenMatcher(const std::vector<AddedToken>* tokens, std::vector<std::pair<std::string, int32_t>> patterns);

  bool empty() const { return nodes_.size() <= 1; }
  // Covers text with spans in order; plain spans are never empty.
  void split(std::string_view text, std::vector<TextSpan>& spans) const;

 private:
  struct Node {
    std::vector<std::pair<uint8_t, int32_t>> children;
    int32_t token_index = -1;  // a pattern ends here
  };
  // Longest pattern starting at pos: its token index and end, or -1.
  int32_t longest_at(std::string_view text, size_t pos, size_t& end) const;

  const std::vector<AddedToken>* tokens_ = nullptr;
  std::vector<Node> nodes_{1};
  bool first_byte_[256] = {};
};

}  // namespace deepinfer::tokenizer
