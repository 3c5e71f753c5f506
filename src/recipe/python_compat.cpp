// Python's json.dumps, float repr, str.strip and truthiness, for rendering chat templates natively.
#include "recipe/python_compat.h"

#include <charconv>
#include <cstdint>
#include <cstdio>
#include <cstdlib>

namespace deepinfer {
namespace {

using Json = nlohmann::ordered_json;

void append_json_string(std::string& out, std::string_view s) {
  out += '"';
  for (const char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\f':
        out += "\\f";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char escaped[8];
          std::snprintf(escaped, sizeof(escaped), "\\u%04x", static_cast<unsigned>(c));
          out += escaped;
        } else {
          out += c;  // ensure_ascii=False: UTF-8 passes through
        }
    }
  }
  out += '"';
}

// repr(float): the shortest round-trip digits, positional for exponents in [-4, 16), otherwise
// d.ddde+XX with at least two exponent digits.
std::string python_float_repr(double value) {
  char buf[64];
  const auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), value, std::chars_format::scientific);
  std::string sci(buf, end);  // "-1.2345e+06"
  const size_t e_pos = sci.find('e');
  std::string mantissa = sci.substr(0, e_pos);
  const int exponent = std::atoi(sci.c_str() + e_pos + 1);
  const bool negative = !mantissa.empty() && mantissa[0] == '-';
  if (negative) mantissa.erase(0, 1);
  const char* sign = negative ? "-" : "";
  std::string digits;
  for (const char c : mantissa) {
    if (c != '.') digits += c;
  }
  // Built by appending: GCC 12's -Wrestrict misfires on chains of std::string operator+.
  std::string out = sign;
  if (exponent < -4 || exponent >= 16) {
    out += digits[0];
    if (digits.size() > 1) {
      out += '.';
      out.append(digits, 1);
    }
    char exp_buf[16];
    std::snprintf(exp_buf, sizeof(exp_buf), "e%c%02d", exponent < 0 ? '-' : '+', std::abs(exponent));
    out += exp_buf;
    return out;
  }
  if (exponent < 0) {
    out += "0.";
    out.append(static_cast<size_t>(-exponent - 1), '0');
    out += digits;
    return out;
  }
  const size_t num_int_digits = static_cast<size_t>(exponent) + 1;
  if (digits.size() <= num_int_digits) {
    out += digits;
    out.append(num_int_digits - digits.size(), '0');
    out += ".0";
  } else {
    out.append(digits, 0, num_int_digits);
    out += '.';
    out.append(digits, num_int_digits);
  }
  return out;
}

void dump(std::string& out, const Json& value, int indent, int depth) {
  const bool pretty = indent >= 0;
  const auto newline = [&](int level) {
    out += '\n';
    out.append(static_cast<size_t>(indent * level), ' ');
  };
  switch (value.type()) {
    case Json::value_t::object: {
      if (value.empty()) {
        out += "{}";
        return;
      }
      out += '{';
      bool first = true;
      for (const auto& [key, item] : value.items()) {
        if (!first) out += pretty ? "," : ", ";
        first = false;
        if (pretty) newline(depth + 1);
        append_json_string(out, key);
        out += ": ";
        dump(out, item, indent, depth + 1);
      }
      if (pretty) newline(depth);
      out += '}';
      return;
    }
    case Json::value_t::array: {
      if (value.empty()) {
        out += "[]";
        return;
      }
      out += '[';
      for (size_t i = 0; i < value.size(); ++i) {
        if (i > 0) out += pretty ? "," : ", ";
        if (pretty) newline(depth + 1);
        dump(out, value[i], indent, depth + 1);
      }
      if (pretty) newline(depth);
      out += ']';
      return;
    }
    case Json::value_t::string:
      append_json_string(out, value.get_ref<const std::string&>());
      return;
    case Json::value_t::boolean:
      out += value.get<bool>() ? "true" : "false";
      return;
    case Json::value_t::number_integer:
      out += std::to_string(value.get<int64_t>());
      return;
    case Json::value_t::number_unsigned:
      out += std::to_string(value.get<uint64_t>());
      return;
    case Json::value_t::number_float:
      out += python_float_repr(value.get<double>());
      return;
    default:
      out += "null";
      return;
  }
}

// Decodes the code point at s[i] (valid UTF-8 assumed) and its length in bytes.
char32_t decode_at(std::string_view s, size_t i, size_t* length) {
  const auto byte = [&](size_t k) { return static_cast<unsigned char>(s[i + k]); };
  const unsigned char lead = byte(0);
  if (lead < 0x80 || i + 1 >= s.size()) {
    *length = 1;
    return lead;
  }
  if (lead < 0xE0) {
    *length = 2;
    return (char32_t{lead & 0x1Fu} << 6) | (byte(1) & 0x3Fu);
  }
  if (lead < 0xF0 && i + 2 < s.size()) {
    *length = 3;
    return (char32_t{lead & 0x0Fu} << 12) | (char32_t{byte(1) & 0x3Fu} << 6) | (byte(2) & 0x3Fu);
  }
  if (i + 3 < s.size()) {
    *length = 4;
    return (char32_t{lead & 0x07u} << 18) | (char32_t{byte(1) & 0x3Fu} << 12) | (char32_t{byte(2) & 0x3Fu} << 6) |
           (byte(3) & 0x3Fu);
  }
  *length = 1;
  return lead;
}

// str.isspace(): the characters Python's str.strip() removes by default.
bool is_python_space(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

}  // namespace

std::string python_json(const nlohmann::ordered_json& value, int indent) {
  std::string out;
  dump(out, value, indent, 0);
  return out;
}

std::string python_str(const nlohmann::ordered_json& value) {
  switch (value.type()) {
    case Json::value_t::string:
      return value.get<std::string>();
    case Json::value_t::boolean:
      return value.get<bool>() ? "True" : "False";
    case Json::value_t::null:
      return "None";
    default:
      return python_json(value);
  }
}

bool python_truthy(const nlohmann::ordered_json& value) {
  switch (value.type()) {
    case Json::value_t::null:
      return false;
    case Json::value_t::boolean:
      return value.get<bool>();
    case Json::value_t::number_integer:
      return value.get<int64_t>() != 0;
    case Json::value_t::number_unsigned:
      return value.get<uint64_t>() != 0;
    case Json::value_t::number_float:
      return value.get<double>() != 0.0;
    case Json::value_t::string:
      return !value.get_ref<const std::string&>().empty();
    default:
      return !value.empty();
  }
}

std::string_view lstrip_chars(std::string_view s, std::string_view chars) {
  const size_t begin = s.find_first_not_of(chars);
  return begin == std::string_view::npos ? std::string_view() : s.substr(begin);
}

std::string_view rstrip_chars(std::string_view s, std::string_view chars) {
  const size_t last = s.find_last_not_of(chars);
  return last == std::string_view::npos ? std::string_view() : s.substr(0, last + 1);
}

std::string_view strip_chars(std::string_view s, std::string_view chars) {
  return rstrip_chars(lstrip_chars(s, chars), chars);
}

std::string_view python_trim(std::string_view s) {
  size_t begin = 0;
  while (begin < s.size()) {
    size_t length = 0;
    if (!is_python_space(decode_at(s, begin, &length))) break;
    begin += length;
  }
  size_t end = begin;
  for (size_t i = begin; i < s.size();) {
    size_t length = 0;
    const bool space = is_python_space(decode_at(s, i, &length));
    i += length;
    if (!space) end = i;
  }
  return s.substr(begin, end - begin);
}

size_t python_len(std::string_view utf8) {
  size_t count = 0;
  for (const char c : utf8) {
    if ((static_cast<unsigned char>(c) & 0xC0) != 0x80) ++count;
  }
  return count;
}

}  // namespace deepinfer
