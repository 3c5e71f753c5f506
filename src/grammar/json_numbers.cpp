// JSON Schema numbers: bounds (integer or decimal, inclusive or exclusive) as digit grammars
// over plain decimals, and `multipleOf`: exact for integers (a remainder automaton over the
// decimal digits) and, on `number`, the sound forms: an integer step generates integers, a
// step of 10^-d decimals with at most d fraction digits (both without exponents).
#include <cmath>
#include <functional>

#include "grammar/json_schema_compiler.h"

namespace deepinfer::grammar {

namespace {

constexpr int64_t kMaxStep = 1000;  // remainder states of the automaton

// A bound as a decimal: sign, integer part, fraction digits without trailing zeros.
struct Decimal {
  bool negative = false;
  uint64_t whole = 0;
  std::string fraction;
  bool zero() const { return whole == 0 && fraction.empty(); }
  Decimal negated() const { return {!negative && !zero(), whole, fraction}; }
};

// Compares magnitudes, then signs: -1, 0, 1.
int compare(const Decimal& a, const Decimal& b) {
  if (a.negative != b.negative) return a.negative ? -1 : 1;
  int magnitude = a.fraction < b.fraction ? -1 : a.fraction == b.fraction ? 0 : 1;  // digit strings compare as decimals
  if (a.whole != b.whole) magnitude = a.whole < b.whole ? -1 : 1;
  return a.negative ? -magnitude : magnitude;
}

// The bound's shortest decimal spelling; nullopt when it needs an exponent or is too large.
std::optional<Decimal> to_decimal(const Json& v) {
  if (!v.is_number() || std::abs(v.get<double>()) > 1e15) return std::nullopt;
  std::string text = v.dump();
  Decimal out;
  if (text[0] == '-') out.negative = true, text.erase(0, 1);
  if (text.find_first_of("eE") != std::string::npos) return std::nullopt;
  const size_t dot = text.find('.');
  out.whole = std::stoull(text.substr(0, dot));
  if (dot != std::string::npos) out.fraction = text.substr(dot + 1);
  while (!out.fraction.empty() && out.fraction.back() == '0') out.fraction.pop_back();
  if (out.zero()) out.negative = false;
  return out;
}

bool has_bounds(const Json& s) {
  for (const char* key : {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"}) {
    if (s.contains(key) && !s[key].is_boolean()) return true;
  }
  return false;
}

}  // namespace

Symbol JsonSchemaCompiler::number(const Json& s, const std::string& pointer) {
  if (auto multiples = multiple_of(s, false, pointer)) return *multiples;
  ByteSet digit, nonzero, exp, sign;
  digit.add_range('0', '9');
  nonzero.add_range('1', '9');
  exp.add('e'), exp.add('E');
  sign.add('+'), sign.add('-');
  const Symbol d = b_.terminal(digit);
  const Symbol digits = b_.repeat(d, 1, -1);
  const Symbol any_digits = b_.repeat(d, 0, -1);
  const Symbol int_part = b_.group({{b_.byte('0')}, {b_.terminal(nonzero), any_digits}});
  const Symbol frac = b_.group({{b_.byte('.'), digits}});
  if (!has_bounds(s)) {
    if (!number_) {
      const Symbol exponent = b_.group({{b_.terminal(exp), b_.optional(b_.terminal(sign)), digits}});
      number_ = b_.group({{b_.optional(b_.byte('-')), int_part, b_.optional(frac), b_.optional(exponent)}});
    }
    return *number_;
  }
  // Bounds are exact over plain decimals (no exponent): the integer part decides, and at a
  // bound's integer part the fraction digits are compared digit by digit.
  struct Bound {
    std::optional<Decimal> value;
    bool exclusive = false;
  };
  Bound lo, hi;
  bool expressible = true;
  auto read = [&](const char* key, bool upper) {
    if (!s.contains(key) || s[key].is_boolean()) return;
    const auto value = to_decimal(s[key]);
    if (!value) {
      expressible = false;
      return;
    }
    const char* draft4 = upper ? "exclusiveMaximum" : "exclusiveMinimum";
    const bool exclusive = std::string(key).rfind("exclusive", 0) == 0 || (s.contains(draft4) && s[draft4] == Json(true));
    Bound& bound = upper ? hi : lo;
    const int order = bound.value ? compare(*value, *bound.value) : 0;
    if (!bound.value || (upper ? order < 0 : order > 0) || (order == 0 && exclusive)) bound = {value, exclusive};
  };
  read("minimum", false), read("exclusiveMinimum", false), read("maximum", true), read("exclusiveMaximum", true);
  if (!expressible) {
    unsupported("'number' bounds that need an exponent or exceed 1e15", pointer);
    if (!b_.ok()) return 0;
    return number(Json::object(), pointer);
  }
  auto digit_range = [&](char from, char to) {
    ByteSet set;
    set.add_range(static_cast<uint8_t>(from), static_cast<uint8_t>(to));
    return b_.terminal(set);
  };
  const Symbol zeros = b_.repeat(b_.byte('0'), 0, -1);
  const Symbol nonzero_tail = b_.group({{zeros, b_.terminal(nonzero), any_digits}});  // 0.D > 0
  // Non-empty fraction digits D with 0.D >= 0.f (or > when strict), and <= 0.f (or <).
  std::function<Symbol(const std::string&, bool)> above = [&](const std::string& f, bool strict) -> Symbol {
    if (f.empty()) return strict ? nonzero_tail : digits;
    std::vector<Sequence> alts;
    if (f[0] < '9') alts.push_back({digit_range(static_cast<char>(f[0] + 1), '9'), any_digits});
    const std::string rest = f.substr(1);
    alts.push_back({b_.byte(static_cast<uint8_t>(f[0])), rest.empty() && !strict ? any_digits : above(rest, strict)});
    return b_.group(std::move(alts));
  };
  std::function<std::optional<Symbol>(const std::string&, bool)> below =
      [&](const std::string& f, bool strict) -> std::optional<Symbol> {
    if (f.empty()) return strict ? std::nullopt : std::optional<Symbol>(b_.repeat(b_.byte('0'), 1, -1));
    std::vector<Sequence> alts;
    if (f[0] > '0') alts.push_back({digit_range('0', static_cast<char>(f[0] - 1)), any_digits});
    const std::string rest = f.substr(1);
    if (rest.empty()) {
      if (!strict) alts.push_back({b_.byte(static_cast<uint8_t>(f[0])), zeros});
    } else {
      std::vector<Sequence> tails = {{}};
      if (auto more = below(rest, strict)) tails.push_back({*more});
      alts.push_back({b_.byte(static_cast<uint8_t>(f[0])), b_.group(std::move(tails))});
    }
    return b_.group(std::move(alts));
  };
  // Decimals v >= 0 with a (<)<= v (<)<= b for a, b >= 0; b unset is unbounded.
  auto nonneg = [&](const Decimal& a, bool a_excl, const std::optional<Decimal>& b, bool b_excl) {
    std::vector<Sequence> alts;
    const int order = b ? compare(*b, a) : 1;
    if (order < 0 || (order == 0 && (a_excl || b_excl))) return alts;
    auto with_int = [&](uint64_t from, std::optional<uint64_t> to, std::vector<Sequence> tails) {
      for (auto seq : nonneg_range(from, to)) {
        seq.push_back(b_.group(tails));
        alts.push_back(std::move(seq));
      }
    };
    // Fraction tails at a's integer part (the fraction absent means .0).
    std::vector<Sequence> low_tails;
    if (a.fraction.empty() && !a_excl) low_tails.push_back({});
    low_tails.push_back({b_.byte('.'), above(a.fraction, a_excl)});
    std::vector<Sequence> high_tails = {{}};
    if (b) {
      if (auto fraction = below(b->fraction, b_excl)) high_tails.push_back({b_.byte('.'), *fraction});
      if (b->fraction.empty() && b_excl) high_tails.clear();
    }
    if (b && b->whole == a.whole) {
      if (!a.fraction.empty() || a_excl) {
        unsupported("'number' bounds whose fractions differ within one integer", pointer);
        if (b_.ok()) with_int(a.whole, a.whole, {{}, {frac}});  // lenient: the fractions dropped
        return alts;
      }
      if (!high_tails.empty()) with_int(a.whole, a.whole, high_tails);
      return alts;
    }
    with_int(a.whole, a.whole, low_tails);
    const std::vector<Sequence> any_tail = {{}, {frac}};
    if (!b) {
      with_int(a.whole + 1, std::nullopt, any_tail);
    } else {
      if (b->whole >= a.whole + 2) with_int(a.whole + 1, b->whole - 1, any_tail);
      if (!high_tails.empty()) with_int(b->whole, b->whole, high_tails);
    }
    return alts;
  };
  std::vector<Sequence> alts;
  const Decimal zero;
  if (!lo.value || lo.value->negative) {
    // v = -y with y > 0: -hi (<)<= y (<)<= -lo.
    const bool hi_negative = hi.value && (hi.value->negative || (hi.value->zero() && hi.exclusive));
    const Decimal y_lo = hi_negative ? hi.value->negated() : zero;
    const bool y_lo_excl = hi_negative ? hi.exclusive : true;
    std::optional<Decimal> y_hi;
    if (lo.value) y_hi = lo.value->negated();
    for (auto seq : nonneg(y_lo, y_lo_excl, y_hi, lo.exclusive)) {
      seq.insert(seq.begin(), b_.byte('-'));
      alts.push_back(std::move(seq));
    }
  }
  if (!hi.value || (!hi.value->negative && !(hi.value->zero() && hi.exclusive))) {
    const bool from_zero = !lo.value || lo.value->negative;
    auto part = nonneg(from_zero ? zero : *lo.value, from_zero ? false : lo.exclusive, hi.value, hi.exclusive);
    alts.insert(alts.end(), part.begin(), part.end());
  }
  if (!b_.ok()) return 0;
  if (alts.empty()) {
    b_.fail("number at '#" + pointer + "' has an empty range");
    return 0;
  }
  return b_.group(std::move(alts));
}

std::optional<Symbol> JsonSchemaCompiler::multiple_of(const Json& s, bool integer, const std::string& pointer) {
  if (!s.contains("multipleOf")) return std::nullopt;
  const std::string at = pointer + "/multipleOf";
  const Json& m = s["multipleOf"];
  if (!m.is_number() || m.get<double>() <= 0) {
    b_.fail("'multipleOf' at '#" + at + "' must be a positive number");
    return b_.empty();
  }
  const double step = m.get<double>();
  if (step == std::floor(step)) {
    if (step == 1 && integer) return std::nullopt;
    if (!integer) {
      // A number that is a multiple of an integer step: generated as an integer.
      Json as_integer = s;
      as_integer["type"] = "integer";
      return this->integer(as_integer, pointer);
    }
    if (step > kMaxStep || has_bounds(s)) {
      unsupported(step > kMaxStep ? "'multipleOf' above " + std::to_string(kMaxStep) : "'multipleOf' together with bounds",
                  at);
      return b_.ok() ? std::nullopt : std::optional<Symbol>(b_.empty());
    }
    // remainder[r]: the digits still to come when the digits so far leave remainder r.
    const auto k = static_cast<int64_t>(step);
    std::vector<int32_t> remainder(static_cast<size_t>(k));
    for (int64_t r = 0; r < k; ++r) remainder[r] = b_.declare_rule("mod_" + std::to_string(r));
    auto digits_to = [&](int64_t r, int first) {
      std::vector<Sequence> alts;
      std::vector<ByteSet> by_target(static_cast<size_t>(k));
      for (int d = first; d <= 9; ++d) by_target[(10 * r + d) % k].add(static_cast<uint8_t>('0' + d));
      for (int64_t t = 0; t < k; ++t) {
        if (!by_target[t].empty()) alts.push_back({b_.terminal(by_target[t]), remainder[t]});
      }
      return alts;
    };
    for (int64_t r = 0; r < k; ++r) {
      auto alts = digits_to(r, 0);
      if (r == 0) alts.push_back({});
      b_.set_alternatives(remainder[r], std::move(alts));
    }
    auto start = digits_to(0, 1);
    start.push_back({b_.byte('0')});
    return b_.group({{b_.optional(b_.byte('-')), b_.group(std::move(start))}});
  }
  if (integer) {
    const double inverse = 1 / step;
    if (std::abs(inverse - std::round(inverse)) < 1e-9 * inverse) return std::nullopt;  // every integer is one
    unsupported("fractional 'multipleOf' on 'integer'", at);
    return b_.ok() ? std::nullopt : std::optional<Symbol>(b_.empty());
  }
  const double places = -std::log10(step);
  const auto d = static_cast<int64_t>(std::round(places));
  if (std::abs(places - static_cast<double>(d)) > 1e-9 || d < 1 || d > 9 || has_bounds(s)) {
    unsupported(has_bounds(s) ? "'multipleOf' together with bounds" : "'multipleOf' other than an integer or 10^-d", at);
    return b_.ok() ? std::nullopt : std::optional<Symbol>(b_.empty());
  }
  ByteSet digit, nonzero;
  digit.add_range('0', '9');
  nonzero.add_range('1', '9');
  const Symbol any_digit = b_.terminal(digit);
  const Symbol int_part = b_.group({{b_.byte('0')}, {b_.terminal(nonzero), b_.repeat(any_digit, 0, -1)}});
  const Symbol fraction = b_.group({{b_.byte('.'), b_.repeat(any_digit, 1, d)}});
  return b_.group({{b_.optional(b_.byte('-')), int_part, b_.optional(fraction)}});
}

}  // namespace deepinfer::grammar
