// JSON Schema leaves: strings (length, pattern, format), integers with bounds as digit-range
// grammars, literal values, any JSON value, keys excluding declared names. Numbers:
// json_numbers.cpp.
#include <cmath>
#include <functional>
#include <limits>
#include <map>

#include "grammar/json_schema_compiler.h"

namespace deepinfer::grammar {

const std::map<std::string, std::string>& json_format_patterns() {
  // Days per month, with 29 February only in leap years.
  static const std::string kDate =
      R"((\d{4}-(0[13578]|1[02])-(0[1-9]|[12]\d|3[01])|\d{4}-(0[469]|11)-(0[1-9]|[12]\d|30)|)"
      R"(\d{4}-02-(0[1-9]|1\d|2[0-8])|(\d\d(0[48]|[2468][048]|[13579][26])|([02468][048]|[13579][26])00)-02-29))";
  static const std::string kTime = R"(([01]\d|2[0-3]):[0-5]\d:[0-5]\d(\.\d{1,9})?(Z|[+-]([01]\d|2[0-3]):[0-5]\d))";
  static const std::string kOctet = R"((25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d))";
  static const std::string kLabel = R"([A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)";
  static const std::map<std::string, std::string> table = {
      {"date", "^" + kDate + "$"},
      {"time", "^" + kTime + "$"},
      {"date-time", "^" + kDate + "T" + kTime + "$"},
      {"uuid", R"(^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$)"},
      {"email", R"(^[A-Za-z0-9_+-]+(\.[A-Za-z0-9_+-]+)*@)" + kLabel + R"((\.)" + kLabel + ")+$"},
      {"hostname", "^" + kLabel + R"((\.)" + kLabel + ")*$"},
      {"uri", R"(^[A-Za-z][A-Za-z0-9+.-]*:([A-Za-z0-9\-._~:/?#@!$&'()*+,;=]|%[0-9A-Fa-f]{2})*$)"},
      {"ipv4", "^(" + kOctet + R"(\.){3})" + kOctet + "$"},
      {"ipv6", R"(^([0-9a-fA-F]{1,4}:){7}[0-9a-fA-F]{1,4}$)"},
      // Internationalised forms, generated in their ASCII subset (a sound restriction).
      {"idn-email", R"(^[A-Za-z0-9_+-]+(\.[A-Za-z0-9_+-]+)*@)" + kLabel + R"((\.)" + kLabel + ")+$"},
      {"idn-hostname", "^" + kLabel + R"((\.)" + kLabel + ")*$"},
      // OpenAPI's base64 data (RFC 4648 alphabet, padded).
      {"byte", R"(^([A-Za-z0-9+/]{4})*([A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$)"},
  };
  return table;
}

namespace {

int num_digits(uint64_t x) {
  int n = 1;
  while (x >= 10) x /= 10, ++n;
  return n;
}

// The bound of an integer keyword as int64; false when it is not a number or out of range.
bool integer_bound(const Json& v, bool upper, bool exclusive, std::optional<int64_t>& out) {
  if (!v.is_number()) return false;
  const double d = v.get<double>();
  if (std::abs(d) > 9.2e18) return false;
  if (v.is_number_integer() || v.is_number_unsigned()) {
    const int64_t x = v.get<int64_t>();
    out = exclusive ? (upper ? x - 1 : x + 1) : x;
    return true;
  }
  const double r = upper ? std::floor(d) : std::ceil(d);
  int64_t x = static_cast<int64_t>(r);
  if (exclusive && r == d) x += upper ? -1 : 1;
  out = x;
  return true;
}

}  // namespace

Symbol JsonSchemaCompiler::ws() {
  if (!ws_) {
    ByteSet set;
    for (char c : {' ', '\t', '\n', '\r'}) set.add(static_cast<uint8_t>(c));
    ws_ = options_.max_whitespace > 0 ? b_.repeat(b_.terminal(set), 0, options_.max_whitespace) : b_.empty();
  }
  return *ws_;
}

Symbol JsonSchemaCompiler::json_char() {
  if (json_char_) return *json_char_;
  // Any character in any JSON spelling: raw, a short escape, or \uXXXX (no surrogate halves,
  // so that every escape is exactly one code point for minLength/maxLength).
  ByteSet hex, hex_not_d, low_octal, short_escape;
  hex.add_range('0', '9'), hex.add_range('A', 'F'), hex.add_range('a', 'f');
  hex_not_d = hex;
  hex_not_d.bits['D' >> 6] &= ~(uint64_t{1} << ('D' & 63));
  hex_not_d.bits['d' >> 6] &= ~(uint64_t{1} << ('d' & 63));
  low_octal.add_range('0', '7');
  for (char c : std::string("\"\\/bfnrt")) short_escape.add(static_cast<uint8_t>(c));
  ByteSet d;
  d.add('D'), d.add('d');
  const Symbol h = b_.terminal(hex);
  const Symbol unicode = b_.group({{b_.terminal(hex_not_d), h, h, h}, {b_.terminal(d), b_.terminal(low_octal), h, h}});
  const Symbol escape = b_.group({{b_.byte('\\'), b_.terminal(short_escape)}, {b_.byte('\\'), b_.byte('u'), unicode}});
  const Symbol raw = build_json_char(b_, {{0, 0x1F}, {'"', '"'}, {'\\', '\\'}}, true);
  json_char_ = b_.group({{raw}, {escape}});
  return *json_char_;
}

Symbol JsonSchemaCompiler::quoted(Symbol body) { return b_.group({{b_.byte('"'), body, b_.byte('"')}}); }

Symbol JsonSchemaCompiler::literal_value(const Json& value) {
  return b_.literal(value.dump(-1, ' ', false, Json::error_handler_t::replace));
}

namespace {

// The length of the single-character atom at the start of body (a class, an escape, '.' or one
// literal code point); 0 when body does not start with one.
size_t atom_length(const std::string& body) {
  if (body.empty()) return 0;
  const char c = body[0];
  if (c == '[') {
    for (size_t i = 1; i < body.size(); ++i) {
      if (body[i] == '\\') ++i;
      else if (body[i] == ']') return i > 1 ? i + 1 : 0;
    }
    return 0;
  }
  if (c == '\\') {
    if (body.size() < 2 || std::string("123456789bBck").find(body[1]) != std::string::npos) return 0;
    if (body[1] == 'u') return body.size() >= 3 && body[2] == '{' ? body.find('}') + 1 : 6;
    return body[1] == 'x' ? 4 : 2;
  }
  if (std::string("()|*+?{}^$").find(c) != std::string::npos) return 0;
  const auto lead = static_cast<unsigned char>(c);
  return lead < 0x80 ? 1 : lead >= 0xF0 ? 4 : lead >= 0xE0 ? 3 : 2;
}

}  // namespace

std::optional<std::string> JsonSchemaCompiler::fold_lengths(const std::string& pattern, int64_t min, int64_t max) {
  // minLength 0 or 1 says nothing more when the pattern cannot match the empty string.
  const auto matches_empty = validator_->search(pattern, "");
  if (max < 0 && (min == 0 || (min == 1 && matches_empty.ok() && !*matches_empty))) return pattern;
  // ^A{lo,hi}$ with a single-character atom A: each repetition is one character.
  if (pattern.size() < 3 || pattern.front() != '^' || pattern.back() != '$' || pattern[pattern.size() - 2] == '\\') {
    return std::nullopt;
  }
  const std::string body = pattern.substr(1, pattern.size() - 2);
  const size_t atom = atom_length(body);
  if (atom == 0 || atom > body.size()) return std::nullopt;
  std::string quantifier = body.substr(atom);
  if (!quantifier.empty() && quantifier.back() == '?' && quantifier.size() > 1) quantifier.pop_back();  // lazy
  int64_t lo = 1, hi = 1;  // hi < 0: unbounded
  if (quantifier == "+") {
    hi = -1;
  } else if (quantifier == "*") {
    lo = 0, hi = -1;
  } else if (quantifier == "?") {
    lo = 0;
  } else if (!quantifier.empty()) {
    const size_t comma = quantifier.find(',');
    if (quantifier.front() != '{' || quantifier.back() != '}' || quantifier.size() > 24 ||
        quantifier.find_first_not_of("0123456789,{}") != std::string::npos) {
      return std::nullopt;
    }
    const std::string first = quantifier.substr(1, std::min(comma, quantifier.size() - 1) - 1);
    if (first.empty()) return std::nullopt;
    lo = std::stoll(first);
    hi = lo;
    if (comma != std::string::npos) {
      const std::string second = quantifier.substr(comma + 1, quantifier.size() - comma - 2);
      hi = second.empty() ? -1 : std::stoll(second);
    }
  }
  lo = std::max(lo, min);
  if (max >= 0) hi = hi < 0 ? max : std::min(hi, max);
  if (hi >= 0 && lo > hi) return std::nullopt;
  return "^" + body.substr(0, atom) + "{" + std::to_string(lo) + "," + (hi < 0 ? "" : std::to_string(hi)) + "}$";
}

Symbol JsonSchemaCompiler::string(const Json& s, const std::string& pointer) {
  const bool has_length = s.contains("minLength") || s.contains("maxLength");
  const int64_t min = s.contains("minLength") && s["minLength"].is_number() ? s["minLength"].get<int64_t>() : 0;
  const int64_t max = s.contains("maxLength") && s["maxLength"].is_number() ? s["maxLength"].get<int64_t>() : -1;
  std::string pattern;
  std::string what;
  if (s.contains("format") && s["format"].is_string()) {
    const std::string format = s["format"].get<std::string>();
    auto found = json_format_patterns().find(format);
    if (found == json_format_patterns().end()) {
      unsupported("format '" + format + "'", pointer + "/format");
      if (!b_.ok()) return 0;
    } else {
      pattern = found->second;
      what = "format";
    }
  }
  if (s.contains("pattern") && s["pattern"].is_string()) {
    if (!pattern.empty()) {
      unsupported("'pattern' together with 'format'", pointer + "/pattern");
      if (!b_.ok()) return 0;
    } else {
      pattern = s["pattern"].get<std::string>();
      what = "pattern";
    }
  }
  if (!pattern.empty()) {
    if (has_length) {
      if (auto folded = fold_lengths(pattern, min, max)) {
        pattern = *folded;
      } else {
        unsupported("'minLength'/'maxLength' together with '" + what + "'", pointer + "/" + what);
        if (!b_.ok()) return 0;
      }
    }
    auto body = build_regex(b_, pattern, true);
    if (!body.ok()) {
      b_.fail(body.error().message + " at '#" + pointer + "/" + what + "'");
      return 0;
    }
    return quoted(*body);
  }
  if (max >= 0 && min > max) {
    b_.fail("string at '#" + pointer + "' has minLength > maxLength");
    return 0;
  }
  if (!has_length) {
    if (!any_string_) any_string_ = quoted(b_.repeat(json_char(), 0, -1));
    return *any_string_;
  }
  return quoted(b_.repeat(json_char(), min, max));
}

std::vector<Sequence> JsonSchemaCompiler::nonneg_range(uint64_t lo, std::optional<uint64_t> hi) {
  ByteSet digit;
  digit.add_range('0', '9');
  const Symbol any_digit = b_.terminal(digit);
  auto digit_class = [&](char a, char b) {
    ByteSet set;
    set.add_range(static_cast<uint8_t>(a), static_cast<uint8_t>(b));
    return b_.terminal(set);
  };
  // Same-length decimal strings a <= b.
  std::function<std::vector<Sequence>(const std::string&, const std::string&)> same = [&](const std::string& a,
                                                                                      const std::string& b) {
    const size_t n = a.size();
    if (a == std::string(n, '0') && b == std::string(n, '9')) return std::vector<Sequence>{Sequence(n, any_digit)};
    if (n == 1) return std::vector<Sequence>{{digit_class(a[0], b[0])}};
    auto prefixed = [&](char c, std::vector<Sequence> alts) {
      for (auto& alt : alts) alt.insert(alt.begin(), b_.byte(static_cast<uint8_t>(c)));
      return alts;
    };
    if (a[0] == b[0]) return prefixed(a[0], same(a.substr(1), b.substr(1)));
    std::vector<Sequence> out = prefixed(a[0], same(a.substr(1), std::string(n - 1, '9')));
    if (a[0] + 1 <= b[0] - 1) {
      Sequence mid = {digit_class(static_cast<char>(a[0] + 1), static_cast<char>(b[0] - 1))};
      mid.insert(mid.end(), n - 1, any_digit);
      out.push_back(mid);
    }
    auto upper = prefixed(b[0], same(std::string(n - 1, '0'), b.substr(1)));
    out.insert(out.end(), upper.begin(), upper.end());
    return out;
  };
  std::vector<Sequence> out;
  const int lo_digits = num_digits(lo);
  const int hi_digits = hi ? num_digits(*hi) : lo_digits;
  uint64_t power = 1;
  for (int i = 1; i < lo_digits; ++i) power *= 10;
  for (int len = lo_digits; len <= hi_digits; ++len) {
    const uint64_t a = len == lo_digits ? lo : power;
    const uint64_t b = hi && len == hi_digits ? *hi : (len >= 20 ? std::numeric_limits<uint64_t>::max() : power * 10 - 1);
    if (a <= b) {
      auto part = same(std::to_string(a), std::to_string(b));
      out.insert(out.end(), part.begin(), part.end());
    }
    if (len < 20) power *= 10;
  }
  if (!hi && lo_digits < 20) {
    // Any number with more digits than lo.
    Sequence longer = {digit_class('1', '9')};
    longer.insert(longer.end(), static_cast<size_t>(lo_digits), any_digit);
    longer.push_back(b_.repeat(any_digit, 0, -1));
    out.push_back(longer);
  }
  return out;
}

Symbol JsonSchemaCompiler::int_range(std::optional<int64_t> lo, std::optional<int64_t> hi, const std::string& pointer) {
  if (lo && hi && *lo > *hi) {
    b_.fail("integer at '#" + pointer + "' has an empty range");
    return 0;
  }
  std::vector<Sequence> alts;
  if (!lo || *lo < 0) {
    const uint64_t mag_lo = hi && *hi < 0 ? static_cast<uint64_t>(-(*hi + 1)) + 1 : 1;
    std::optional<uint64_t> mag_hi;
    if (lo) mag_hi = static_cast<uint64_t>(-(*lo + 1)) + 1;
    for (auto seq : nonneg_range(mag_lo, mag_hi)) {
      seq.insert(seq.begin(), b_.byte('-'));
      alts.push_back(std::move(seq));
    }
  }
  if (!hi || *hi >= 0) {
    std::optional<uint64_t> nonneg_hi;
    if (hi) nonneg_hi = static_cast<uint64_t>(*hi);
    auto part = nonneg_range(lo && *lo > 0 ? static_cast<uint64_t>(*lo) : 0, nonneg_hi);
    alts.insert(alts.end(), part.begin(), part.end());
  }
  return b_.group(std::move(alts));
}

Symbol JsonSchemaCompiler::integer(const Json& s, const std::string& pointer) {
  if (auto multiples = multiple_of(s, true, pointer)) return *multiples;
  std::optional<int64_t> lo, hi;
  auto bound = [&](const char* key, bool upper) {
    if (!s.contains(key)) return true;
    const Json& v = s[key];
    if (v.is_boolean()) return true;  // draft-04 form, read with minimum/maximum
    const bool exclusive = std::string(key).rfind("exclusive", 0) == 0;
    const char* draft4 = upper ? "exclusiveMaximum" : "exclusiveMinimum";
    const bool draft4_exclusive = !exclusive && s.contains(draft4) && s[draft4] == Json(true);
    std::optional<int64_t> x;
    if (!integer_bound(v, upper, exclusive || draft4_exclusive, x)) {
      unsupported("bound '" + std::string(key) + "' outside the 64-bit range", pointer + "/" + key);
      return b_.ok();
    }
    std::optional<int64_t>& target = upper ? hi : lo;
    target = !target ? x : upper ? std::min(*target, *x) : std::max(*target, *x);
    return true;
  };
  if (!bound("minimum", false) || !bound("exclusiveMinimum", false) || !bound("maximum", true) ||
      !bound("exclusiveMaximum", true)) {
    return 0;
  }
  return int_range(lo, hi, pointer);
}

Symbol JsonSchemaCompiler::any_value() {
  if (any_value_) return *any_value_;
  const int32_t value = b_.declare_rule("any_value");
  any_value_ = value;
  const Symbol sep = b_.group({{ws(), b_.byte(','), ws()}});
  const Symbol string = this->string(Json::object(), "");
  const Symbol member = b_.group({{string, ws(), b_.byte(':'), ws(), value}});
  const Symbol object = b_.group({{b_.byte('{'), ws(), b_.byte('}')},
                                  {b_.byte('{'), ws(), member, b_.repeat(b_.group({{sep, member}}), 0, -1), ws(), b_.byte('}')}});
  any_object_ = object;
  const Symbol array = b_.group({{b_.byte('['), ws(), b_.byte(']')},
                                 {b_.byte('['), ws(), value, b_.repeat(b_.group({{sep, value}}), 0, -1), ws(), b_.byte(']')}});
  b_.set_alternatives(value, {{object}, {array}, {string}, {number(Json::object(), "")}, {b_.literal("true")},
                              {b_.literal("false")}, {b_.literal("null")}});
  return value;
}

Symbol JsonSchemaCompiler::any_object() {
  any_value();
  return *any_object_;
}

namespace {

// Whether prefix (JSON string body bytes) ends between two characters.
bool at_char_boundary(const std::string& prefix) {
  size_t i = 0;
  while (i < prefix.size()) {
    const auto c = static_cast<uint8_t>(prefix[i]);
    size_t n = c < 0x80 ? 1 : c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : 2;
    if (c == '\\') n = i + 1 < prefix.size() && prefix[i + 1] == 'u' ? 6 : 2;
    i += n;
  }
  return i == prefix.size();
}

}  // namespace

Symbol JsonSchemaCompiler::string_excluding(const std::vector<std::string>& keys) {
  if (keys.empty()) return string(Json::object(), "");
  // A trie of the excluded keys' JSON bodies; at each node the string may end (unless a key
  // ends there), leave the trie with another character, or follow a child.
  std::vector<std::string> bodies;
  for (const auto& k : keys) {
    const std::string dumped = Json(k).dump(-1, ' ', false, Json::error_handler_t::replace);
    bodies.push_back(dumped.substr(1, dumped.size() - 2));
  }
  const Symbol free_chars = b_.repeat(json_char(), 0, -1);
  std::function<Symbol(const std::string&)> node = [&](const std::string& prefix) -> Symbol {
    std::vector<Sequence> alts;
    bool is_key = false;
    std::map<uint8_t, bool> children;
    for (const auto& body : bodies) {
      if (body.compare(0, prefix.size(), prefix) != 0) continue;
      if (body.size() == prefix.size()) is_key = true;
      else children[static_cast<uint8_t>(body[prefix.size()])] = true;
    }
    if (!is_key) alts.push_back({b_.byte('"')});
    // Leaving the trie is offered only between whole characters, with a character whose first
    // byte no child has; inside a character or an escape the key's bytes are the only path.
    if (at_char_boundary(prefix)) {
      std::vector<CodepointRange> excluded;
      for (const auto& [c, unused] : children) {
        if (c == '\\') {
          excluded.insert(excluded.end(), {{0, 0x1F}, {'"', '"'}, {'\\', '\\'}});
        } else if (c < 0x80) {
          excluded.push_back({c, c});
        } else if (c >= 0xC0) {
          const int n = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : 2;
          const uint32_t lo = static_cast<uint32_t>(c & (0x7F >> n)) << (6 * (n - 1));
          excluded.push_back({lo, lo + (1u << (6 * (n - 1))) - 1});
        }
      }
      alts.push_back({build_json_char(b_, excluded, true), free_chars, b_.byte('"')});
    }
    for (auto& [c, unused] : children) {
      alts.push_back({b_.byte(c), node(prefix + static_cast<char>(c))});
    }
    return b_.group(std::move(alts));
  };
  return b_.group({{b_.byte('"'), node("")}});
}

Result<Grammar> JsonSchemaCompiler::compile_object_mode() {
  return b_.finish_root(any_object(), "json_object");
}

}  // namespace deepinfer::grammar
