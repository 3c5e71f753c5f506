// Strict base64 decoding, and encoding (see base64.h).
#include "core/base64.h"

#include <array>
#include <string>

namespace deepinfer {
namespace {

constexpr int8_t kNotBase64 = -1;

constexpr std::string_view kAlphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

constexpr std::array<int8_t, 256> make_decode_table() {
  std::array<int8_t, 256> table{};
  table.fill(kNotBase64);
  for (size_t i = 0; i < kAlphabet.size(); ++i) table[static_cast<uint8_t>(kAlphabet[i])] = static_cast<int8_t>(i);
  return table;
}

constexpr std::array<int8_t, 256> kDecodeTable = make_decode_table();

std::string describe_char(char c) {
  const auto byte = static_cast<unsigned char>(c);
  if (byte >= 0x21 && byte < 0x7f) return std::string("'") + c + "'";
  static constexpr char kDigits[] = "0123456789abcdef";
  return std::string("byte 0x") + kDigits[byte >> 4] + kDigits[byte & 15];
}

}  // namespace

Result<std::vector<uint8_t>> try_decode_base64(std::string_view text) {
  if (text.size() % 4 != 0) {
    return Error{"base64 data is " + std::to_string(text.size()) +
                 " characters long, not a multiple of 4 (cut short, or missing its '=' padding?)"};
  }
  size_t num_padding = 0;
  if (!text.empty() && text.back() == '=') num_padding = text[text.size() - 2] == '=' ? 2 : 1;
  const size_t num_data_chars = text.size() - num_padding;
  std::vector<uint8_t> out;
  out.reserve(text.size() / 4 * 3);
  uint32_t bits = 0;
  int num_bits = 0;
  for (size_t i = 0; i < num_data_chars; ++i) {
    const int8_t value = kDecodeTable[static_cast<uint8_t>(text[i])];
    if (value == kNotBase64) {
      const std::string hint = text[i] == '='                     ? " (padding before the end)"
                               : text[i] == '-' || text[i] == '_' ? " (URL-safe base64 is not accepted)"
                                                                  : "";
      return Error{"base64 data has " + describe_char(text[i]) + " at offset " + std::to_string(i) +
                   ", which is not in the base64 alphabet" + hint};
    }
    bits = (bits << 6) | static_cast<uint32_t>(value);
    num_bits += 6;
    if (num_bits >= 8) {
      num_bits -= 8;
      out.push_back(static_cast<uint8_t>(bits >> num_bits));
      bits &= (1u << num_bits) - 1;
    }
  }
  // 1 pad: 3 chars = 18 bits, 2 left over; 2 pads: 2 chars = 12 bits, 4 left over. They must be 0.
  if (bits != 0) {
    return Error{"base64 data has nonzero bits after its last byte (offset " + std::to_string(num_data_chars - 1) +
                 "): not a canonical encoding"};
  }
  return out;
}

std::string encode_base64(std::span<const uint8_t> bytes) {
  std::string out;
  out.reserve((bytes.size() + 2) / 3 * 4);
  for (size_t i = 0; i < bytes.size(); i += 3) {
    const size_t left = bytes.size() - i;
    const uint32_t chunk = (uint32_t{bytes[i]} << 16) | (left > 1 ? uint32_t{bytes[i + 1]} << 8 : 0) |
                           (left > 2 ? uint32_t{bytes[i + 2]} : 0);
    out += kAlphabet[(chunk >> 18) & 63];
    out += kAlphabet[(chunk >> 12) & 63];
    out += left > 1 ? kAlphabet[(chunk >> 6) & 63] : '=';
    out += left > 2 ? kAlphabet[chunk & 63] : '=';
  }
  return out;
}

}  // namespace deepinfer
