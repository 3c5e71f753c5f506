// JSON Schema leaves: strings (length, pattern, format), integers with bounds as digit-range
// grammars, numbers, literal values, any JSON value, keys excluding declared names.
#include <cmath>
#include <functional>
#include <limits>
#include <map>

#include "grammar/json_schema_compiler.h"

namespace deepinfer::grammar {

namespace {

// Anchored regexes (JSON string content) that accept only valid instances of each format.
const std::map<std::string, std::string>& format_patterns() {
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
  };
  return table;
}

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

Symbol JsonSchemaCompiler::string(const Json& s, const std::string& pointer) {
  const bool has_length = s.contains("minLength") || s.contains("maxLength");
  const int64_t min = s.contains("minLength") && s["minLength"].is_number() ? s["minLength"].get<int64_t>() : 0;
  const int64_t max = s.contains("maxLength") && s["maxLength"].is_number() ? s["maxLength"].get<int64_t>() : -1;
  std::string pattern;
  std::string what;
  if (s.contains("format") && s["format"].is_string()) {
    const std::string format = s["format"].get<std::string>();
    auto found = format_patterns().find(format);
    if (found == format_patterns().end()) {
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
      unsupported("'minLength'/'maxLength' together with '" + what + "'", pointer + "/" + what);
      if (!b_.ok()) return 0;
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

Symbol JsonSchemaCompiler::number(const Json& s, const std::string& pointer) {
  ByteSet digit, nonzero, exp, sign;
  digit.add_range('0', '9');
  nonzero.add_range('1', '9');
  exp.add('e'), exp.add('E');
  sign.add('+'), sign.add('-');
  const Symbol d = b_.terminal(digit);
  const Symbol digits = b_.repeat(d, 1, -1);
  const Symbol int_part = b_.group({{b_.byte('0')}, {b_.terminal(nonzero), b_.repeat(d, 0, -1)}});
  const Symbol frac = b_.group({{b_.byte('.'), digits}});
  const bool bounded = s.contains("minimum") || s.contains("maximum") || s.contains("exclusiveMinimum") ||
                       s.contains("exclusiveMaximum");
  if (!bounded) {
    if (!number_) {
      const Symbol exponent = b_.group({{b_.terminal(exp), b_.optional(b_.terminal(sign)), digits}});
      number_ = b_.group({{b_.optional(b_.byte('-')), int_part, b_.optional(frac), b_.optional(exponent)}});
    }
    return *number_;
  }
  // Integer-valued bounds are exact over plain decimals (no exponent): the integer part
  // decides, and only at a bound does the fraction matter.
  struct Bound {
    std::optional<int64_t> value;
    bool exclusive = false;
  };
  Bound lo, hi;
  bool expressible = true;
  auto read = [&](const char* key, bool upper) {
    if (!s.contains(key) || s[key].is_boolean()) return;
    const Json& v = s[key];
    const double x = v.is_number() ? v.get<double>() : 0.5;
    if (!v.is_number() || x != std::floor(x) || std::abs(x) > 1e15) {
      expressible = false;
      return;
    }
    const bool exclusive = std::string(key).rfind("exclusive", 0) == 0 ||
                           (s.contains(upper ? "exclusiveMaximum" : "exclusiveMinimum") &&
                            s[upper ? "exclusiveMaximum" : "exclusiveMinimum"] == Json(true));
    Bound& bound = upper ? hi : lo;
    const auto value = static_cast<int64_t>(x);
    const bool tighter = !bound.value || (upper ? value < *bound.value : value > *bound.value) ||
                         (value == *bound.value && exclusive);
    if (tighter) bound = {value, exclusive};
  };
  read("minimum", false), read("exclusiveMinimum", false), read("maximum", true), read("exclusiveMaximum", true);
  if (!expressible) {
    unsupported("non-integer bounds on 'number'", pointer);
    if (!b_.ok()) return 0;
    return number(Json::object(), pointer);
  }
  const Symbol zero_frac = b_.group({{b_.byte('.'), b_.repeat(b_.byte('0'), 1, -1)}});
  const Symbol nonzero_frac =
      b_.group({{b_.byte('.'), b_.repeat(b_.byte('0'), 0, -1), b_.terminal(nonzero), b_.repeat(d, 0, -1)}});
  // Decimals v >= 0 with a (<) v (<) b for integers 0 <= a, b; b unset is unbounded.
  auto nonneg = [&](int64_t a, bool a_excl, std::optional<int64_t> b, bool b_excl) {
    std::vector<Sequence> alts;
    if (b && (*b < a || (*b == a && (a_excl || b_excl)))) return alts;
    auto with_int = [&](uint64_t from, std::optional<uint64_t> to, std::optional<Symbol> tail) {
      for (auto seq : nonneg_range(from, to)) {
        if (tail) seq.push_back(*tail);
        alts.push_back(std::move(seq));
      }
    };
    const auto ua = static_cast<uint64_t>(a);
    if (b && *b == a) {
      with_int(ua, ua, b_.optional(zero_frac));
      return alts;
    }
    with_int(ua, ua, a_excl ? nonzero_frac : b_.optional(frac));
    if (!b) {
      with_int(ua + 1, std::nullopt, b_.optional(frac));
    } else {
      if (*b - 1 >= a + 1) with_int(ua + 1, static_cast<uint64_t>(*b - 1), b_.optional(frac));
      if (!b_excl) with_int(static_cast<uint64_t>(*b), static_cast<uint64_t>(*b), b_.optional(zero_frac));
    }
    return alts;
  };
  std::vector<Sequence> alts;
  if (!lo.value || *lo.value < 0) {
    // v = -y with y > 0: -hi (<) y (<) -lo.
    const bool hi_negative = hi.value && (*hi.value < 0 || (*hi.value == 0 && hi.exclusive));
    const int64_t y_lo = hi_negative ? -*hi.value : 0;
    const bool y_lo_excl = hi_negative ? hi.exclusive : true;
    std::optional<int64_t> y_hi;
    if (lo.value) y_hi = -*lo.value;
    for (auto seq : nonneg(y_lo, y_lo_excl, y_hi, lo.exclusive)) {
      seq.insert(seq.begin(), b_.byte('-'));
      alts.push_back(std::move(seq));
    }
  }
  if (!hi.value || *hi.value > 0 || (*hi.value == 0 && !hi.exclusive)) {
    const bool from_zero = !lo.value || *lo.value < 0;
    auto part = nonneg(from_zero ? 0 : *lo.value, from_zero ? false : lo.exclusive, hi.value, hi.exclusive);
    alts.insert(alts.end(), part.begin(), part.end());
  }
  if (alts.empty()) {
    b_.fail("number at '#" + pointer + "' has an empty range");
    return 0;
  }
  return b_.group(std::move(alts));
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
  const Symbol top = any_object();
  const int32_t rule = b_.define_rule("root", {Sequence{top}});
  auto grammar = b_.finish(rule);
  if (!grammar.ok()) return Error{"json_object: " + grammar.error().message};
  return grammar;
}

}  // namespace deepinfer::grammar
