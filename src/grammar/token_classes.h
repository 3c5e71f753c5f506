// The vocabulary split by a character class, once per (vocabulary, class): tokens made only of
// the class's characters ("inside" tokens, grouped by length in code points) and the rest, each
// with the position of its first character outside the class. The mask of a state that moves
// every class character along one chain (a JSON string body, bounded or not) is then a copy of
// a precomputed bitmask plus a walk of the few tokens that leave the class (class_mask.cpp).
#pragma once

#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "grammar/grammar.h"

namespace deepinfer::grammar {

class TokenVocab;

// A set of characters: ASCII bytes, plus (when multibyte) every well-formed multi-byte UTF-8
// sequence (no surrogates, no overlong forms, at most U+10FFFF).
struct CharClass {
  ByteSet ascii;  // bytes < 0x80 only
  bool multibyte = false;
  std::string key() const;
};

// Immutable once built.
struct TokenClassIndex {
  // The longest chain of counted states a mask follows (a bounded string's next characters).
  static constexpr int kMaxCounted = 32;

  // prefix_masks[c]: inside tokens of at most c code points, c = 0..kMaxCounted, each
  // num_mask_words words.
  std::vector<std::vector<uint32_t>> prefix_masks;
  std::vector<uint32_t> inside_mask;  // every inside token
  // Every inside token by code point count; those of at least c code points start at
  // inside_ids[first_with_count[c]], c = 0..kMaxCounted + 1.
  std::vector<int32_t> inside_ids;
  std::vector<size_t> first_with_count;
  // Tokens with a character outside the class: the first `codepoint` characters are inside,
  // the one starting at byte_pos (with byte `byte`) is not.
  struct Exit {
    int32_t id;
    int32_t byte_pos;
  };
  std::vector<Exit> exits;
  // exits[begin, end) share codepoint and byte (a group is decided by one step when dead);
  // sorted by codepoint, which is capped at kMaxCounted + 1 (past any chain).
  struct ExitGroup {
    int32_t codepoint;
    uint8_t byte;
    uint32_t begin;
    uint32_t end;
  };
  std::vector<ExitGroup> exit_groups;
};

// One shape of well-formed multi-byte UTF-8: byte k lies in [lo[k], hi[k]] (Unicode table 3-7).
struct Utf8Form {
  int length;
  uint8_t lo[4];
  uint8_t hi[4];
};
const std::vector<Utf8Form>& utf8_forms();

// The ASCII classes the vocabulary is split by, largest first: a state's own class uses the
// largest of these it contains (the rest of its bytes are walked), so the splits are built a few
// times per vocabulary, not once per pattern. JSON string bodies, printable text, identifiers.
const std::vector<ByteSet>& standard_ascii_classes();

// Byte length of the well-formed UTF-8 sequence starting at s[i] (2-4), or 0 when the bytes
// there are not one (ASCII, a stray continuation, truncated, overlong or a surrogate).
int utf8_sequence_length(const std::string& s, size_t i);
// Byte offset of code point k of s, counting an ASCII byte or a well-formed sequence as one
// (the first k code points must be such characters).
size_t codepoint_offset(const std::string& s, int k);

// Thread-safe LRU of indexes for one vocabulary (built on first use, ~1 ms at 128K tokens).
class TokenClassCache {
 public:
  explicit TokenClassCache(size_t max_entries = 16) : max_entries_(max_entries) {}
  std::shared_ptr<const TokenClassIndex> get(const TokenVocab& vocab, const CharClass& char_class);

 private:
  size_t max_entries_;
  std::mutex mutex_;
  std::list<std::string> lru_;
  std::unordered_map<std::string, std::pair<std::shared_ptr<const TokenClassIndex>, std::list<std::string>::iterator>>
      entries_;
};

}  // namespace deepinfer::grammar
