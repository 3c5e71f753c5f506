// UTF-8 helpers for the tokenizer: validation with Rust's error rules, code point iteration,
// and a streaming lossy decoder that replaces invalid bytes exactly like String::from_utf8_lossy.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace deepinfer::tokenizer {

inline constexpr std::string_view kReplacementChar = "\xEF\xBF\xBD";  // U+FFFD

struct Utf8Check {
  size_t valid_up_to = 0;  // bytes [0, valid_up_to) are valid UTF-8
  // 0: the input is valid, or ends inside a sequence that more bytes could complete.
  // 1-3: the invalid sequence at valid_up_to spans this many bytes (one U+FFFD replaces it).
  size_t error_len = 0;
  bool incomplete() const { return error_len == 0; }
};

// Finds the first invalid or incomplete sequence (same rules as Rust's str::from_utf8).
Utf8Check check_utf8(std::string_view bytes);

// Returns SIZE_MAX when bytes is complete, valid UTF-8; else the offset of the first bad byte.
size_t find_invalid_utf8(std::string_view bytes);

// Decodes the code point at text[pos] (text must be valid UTF-8) and advances pos.
inline char32_t next_code_point(std::string_view text, size_t& pos) {
  auto b0 = static_cast<uint8_t>(text[pos]);
  if (b0 < 0x80) {
    ++pos;
    return b0;
  }
  auto cont = [&](size_t k) { return static_cast<char32_t>(static_cast<uint8_t>(text[pos + k]) & 0x3F); };
  char32_t cp;
  if (b0 < 0xE0) {
    cp = (static_cast<char32_t>(b0 & 0x1F) << 6) | cont(1);
    pos += 2;
  } else if (b0 < 0xF0) {
    cp = (static_cast<char32_t>(b0 & 0x0F) << 12) | (cont(1) << 6) | cont(2);
    pos += 3;
  } else {
    cp = (static_cast<char32_t>(b0 & 0x07) << 18) | (cont(1) << 12) | (cont(2) << 6) | cont(3);
    pos += 4;
  }
  return cp;
}

// Length in bytes of the sequence starting with lead byte b (1 for continuation bytes).
inline size_t utf8_sequence_length(uint8_t b) {
  if (b < 0xC0) return 1;
  if (b < 0xE0) return 2;
  if (b < 0xF0) return 3;
  return 4;
}

void append_utf8(std::string& out, char32_t cp);

// from_utf8_lossy over a byte stream fed in pieces: push() returns the text that is final so far
// (whole code points, U+FFFD for invalid sequences) and keeps an incomplete tail for later.
class Utf8LossyStream {
 public:
  void push(std::string_view bytes, std::string& out);
  // Ends the stream: an incomplete tail becomes one U+FFFD.
  void finish(std::string& out);

 private:
  std::string pending_;
};

// One-shot from_utf8_lossy.
std::string utf8_lossy(std::string_view bytes);

}  // namespace deepinfer::tokenizer
