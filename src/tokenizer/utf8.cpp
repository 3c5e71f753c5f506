// UTF-8 validation and lossy decoding, following the rules of Rust's core::str (which the
// Hugging Face tokenizers library uses), so replacement characters land in the same places.
#include "tokenizer/utf8.h"

namespace deepinfer::tokenizer {

namespace {

inline bool is_cont(uint8_t b) { return (b & 0xC0) == 0x80; }

}  // namespace

Utf8Check check_utf8(std::string_view bytes) {
  const auto* s = reinterpret_cast<const uint8_t*>(bytes.data());
  size_t n = bytes.size();
  size_t i = 0;
  while (i < n) {
    // ASCII fast path, 8 bytes at a time.
    while (i + 8 <= n) {
      uint64_t word;
      __builtin_memcpy(&word, s + i, 8);
      if (word & 0x8080808080808080ull) break;
      i += 8;
    }
    if (i >= n) break;
    uint8_t b0 = s[i];
    if (b0 < 0x80) {
      ++i;
      continue;
    }
    Utf8Check bad{i, 0};
    if (b0 >= 0xC2 && b0 <= 0xDF) {
      if (i + 1 >= n) return bad;
      if (!is_cont(s[i + 1])) return {i, 1};
      i += 2;
    } else if (b0 >= 0xE0 && b0 <= 0xEF) {
      if (i + 1 >= n) return bad;
      uint8_t b1 = s[i + 1];
      bool ok1 = b0 == 0xE0 ? (b1 >= 0xA0 && b1 <= 0xBF) : b0 == 0xED ? (b1 >= 0x80 && b1 <= 0x9F) : is_cont(b1);
      if (!ok1) return {i, 1};
      if (i + 2 >= n) return bad;
      if (!is_cont(s[i + 2])) return {i, 2};
      i += 3;
    } else if (b0 >= 0xF0 && b0 <= 0xF4) {
      if (i + 1 >= n) return bad;
      uint8_t b1 = s[i + 1];
      bool ok1 = b0 == 0xF0 ? (b1 >= 0x90 && b1 <= 0xBF) : b0 == 0xF4 ? (b1 >= 0x80 && b1 <= 0x8F) : is_cont(b1);
      if (!ok1) return {i, 1};
      if (i + 2 >= n) return bad;
      if (!is_cont(s[i + 2])) return {i, 2};
      if (i + 3 >= n) return bad;
      if (!is_cont(s[i + 3])) return {i, 3};
      i += 4;
    } else {
      return {i, 1};
    }
  }
  return {n, 0};
}

size_t find_invalid_utf8(std::string_view bytes) {
  Utf8Check check = check_utf8(bytes);
  return check.valid_up_to == bytes.size() ? SIZE_MAX : check.valid_up_to;
}

void append_utf8(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

void Utf8LossyStream::push(std::string_view bytes, std::string& out) {
  std::string_view rest = bytes;
  if (!pending_.empty()) {
    pending_.append(bytes);
    rest = pending_;
  }
  for (;;) {
    Utf8Check check = check_utf8(rest);
    out.append(rest.substr(0, check.valid_up_to));
    if (check.valid_up_to == rest.size()) {
      pending_.clear();
      return;
    }
    if (check.incomplete()) {
      std::string tail(rest.substr(check.valid_up_to));
      pending_ = std::move(tail);
      return;
    }
    out.append(kReplacementChar);
    rest.remove_prefix(check.valid_up_to + check.error_len);
  }
}

void Utf8LossyStream::finish(std::string& out) {
  if (!pending_.empty()) out.append(kReplacementChar);
  pending_.clear();
}

std::string utf8_lossy(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  Utf8LossyStream stream;
  stream.push(bytes, out);
  stream.finish(out);
  return out;
}

}  // namespace deepinfer::tokenizer
