// The regex front end: the ECMAScript subset JSON Schema's `pattern` uses (classes, escapes,
// greedy and lazy quantifiers, alternation, groups, ^ and $ at the ends, also inside a group
// that is a whole top-level alternative). Lookarounds, backreferences and \b are rejected
// rather than approximated.
#include <algorithm>
#include <cctype>
#include <cstdio>
#include <optional>

#include "grammar/front_ends.h"

namespace deepinfer::grammar {

namespace {

const std::vector<CodepointRange> kDigit = {{'0', '9'}};
const std::vector<CodepointRange> kWord = {{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}};
const std::vector<CodepointRange> kSpace = {{'\t', '\r'}, {' ', ' '},       {0xA0, 0xA0},     {0x1680, 0x1680},
                                            {0x2000, 0x200A}, {0x2028, 0x2029}, {0x202F, 0x202F}, {0x205F, 0x205F},
                                            {0x3000, 0x3000}, {0xFEFF, 0xFEFF}};
const std::vector<CodepointRange> kLineTerminators = {{'\n', '\n'}, {'\r', '\r'}, {0x2028, 0x2029}};

// The JSON string escape of a control character, '"' or '\\'.
std::string json_escape(uint32_t cp) {
  char buf[8];
  switch (cp) {
    case '"': return "\\\"";
    case '\\': return "\\\\";
    case '\b': return "\\b";
    case '\f': return "\\f";
    case '\n': return "\\n";
    case '\r': return "\\r";
    case '\t': return "\\t";
    default: std::snprintf(buf, sizeof buf, "\\u%04x", cp); return buf;
  }
}

// Calls at(i, depth) for each character p[i] outside escapes and character classes, depth
// being the group nesting after p[i]; stops when at returns false.
template <typename Visit>
void for_each_structural(std::string_view p, Visit&& at) {
  int depth = 0;
  bool in_class = false;
  for (size_t i = 0; i < p.size(); ++i) {
    const char c = p[i];
    if (c == '\\') {
      ++i;
    } else if (in_class) {
      in_class = c != ']';
    } else if (c == '[') {
      in_class = true;
    } else {
      if (c == '(' || c == ')') depth += c == '(' ? 1 : -1;
      if (!at(i, depth)) return;
    }
  }
}

// p split at its top-level '|' (outside groups and classes).
std::vector<std::string_view> top_alternatives(std::string_view p) {
  std::vector<std::string_view> out;
  size_t start = 0;
  for_each_structural(p, [&](size_t i, int depth) {
    if (p[i] == '|' && depth == 0) {
      out.push_back(p.substr(start, i - start));
      start = i + 1;
    }
    return true;
  });
  out.push_back(p.substr(start));
  return out;
}

// The group's content when alt is one whole group (not a lookaround), else nullopt.
std::optional<std::string_view> whole_group(std::string_view alt) {
  if (alt.size() < 2 || alt.front() != '(' || alt.back() != ')') return std::nullopt;
  bool closes_early = false;  // the first group closes before the end
  for_each_structural(alt.substr(0, alt.size() - 1), [&](size_t i, int depth) {
    closes_early = alt[i] == ')' && depth == 0;
    return !closes_early;
  });
  if (closes_early) return std::nullopt;
  std::string_view inner = alt.substr(1, alt.size() - 2);
  if (inner.rfind("?:", 0) == 0) return inner.substr(2);
  if (inner.rfind("?<", 0) == 0 && inner.rfind("?<=", 0) != 0 && inner.rfind("?<!", 0) != 0) {
    const size_t close = inner.find('>');
    return close == std::string_view::npos ? std::nullopt : std::optional<std::string_view>(inner.substr(close + 1));
  }
  if (inner.rfind("?", 0) == 0) return std::nullopt;
  return inner;
}

// The pattern with each top-level alternative that is one whole group replaced by the group's
// alternatives (a group does not change the language), so `(^gs://.+)|(^https?://.+)` gets
// the anchors the parser accepts at the ends of top-level alternatives.
std::string unwrap_top_groups(std::string_view p, int depth = 0) {
  std::string out;
  for (std::string_view alt : top_alternatives(p)) {
    if (!out.empty() || alt.data() != p.data()) out += '|';
    const auto inner = depth < 32 ? whole_group(alt) : std::nullopt;
    out += inner ? unwrap_top_groups(*inner, depth + 1) : std::string(alt);
  }
  return out;
}

class RegexParser {
 public:
  friend Symbol grammar::build_json_char(GrammarBuilder&, std::vector<CodepointRange>, bool);
  // json_string: the output is JSON string content (escaped); unanchored: `.*` is implied on a
  // side without an anchor (JSON Schema's `pattern`), else the whole text must match.
  RegexParser(GrammarBuilder& b, std::string_view pattern, bool json_string, bool unanchored)
      : b_(b), text_(unwrap_top_groups(pattern)), p_(text_), json_(json_string), unanchored_(unanchored) {}

  Result<Symbol> parse() {
    // Top-level alternatives carry their own anchors; an unanchored end admits any text.
    std::vector<Sequence> alternatives;
    for (bool first = true;; first = false) {
      if (!first) ++pos_;  // the '|'
      Sequence seq;
      const bool start_anchored = pos_ < p_.size() && p_[pos_] == '^';
      if (start_anchored) ++pos_;
      if (!start_anchored && unanchored_) seq.push_back(any_text());
      Sequence body = parse_sequence(0);
      seq.insert(seq.end(), body.begin(), body.end());
      const bool end_anchored = pos_ < p_.size() && p_[pos_] == '$';
      if (end_anchored) ++pos_;
      if (!end_anchored && unanchored_) seq.push_back(any_text());
      alternatives.push_back(std::move(seq));
      if (!b_.ok() || pos_ >= p_.size() || p_[pos_] != '|') break;
    }
    if (b_.ok() && pos_ < p_.size()) set_error(p_[pos_] == ')' ? "unmatched ')'" : "unexpected '" + std::string(1, p_[pos_]) + "'");
    if (!b_.ok()) return Error{"regex /" + std::string(p_) + "/: " + b_.error()};
    return b_.group(std::move(alternatives));
  }

 private:
  void set_error(const std::string& what) { b_.fail(what + " at offset " + std::to_string(pos_)); }

  Symbol any_text() {
    if (!any_text_) any_text_ = b_.repeat(chars(kWholeRange, false), 0, -1);
    return *any_text_;
  }

  static inline const std::vector<CodepointRange> kWholeRange = {{0, 0x10FFFF}};

  // The code points of ranges as output bytes: UTF-8, or JSON string content.
  Symbol chars(std::vector<CodepointRange> ranges, bool negated) {
    if (negated) ranges = negate_ranges(ranges);
    ranges = normalize_ranges(std::move(ranges));
    if (!json_) return b_.codepoints(std::move(ranges), false);
    std::vector<CodepointRange> raw;
    std::vector<Sequence> alternatives;
    for (const auto& r : ranges) {
      for (uint32_t cp = r.lo; cp <= std::min<uint32_t>(r.hi, 0x5C); ++cp) {
        if (cp >= 0x20 && cp != '"' && cp != '\\') continue;
        const std::string escaped = json_escape(cp);
        Sequence seq;
        b_.append_literal(seq, escaped);
        alternatives.push_back(std::move(seq));
      }
      raw.push_back(r);
    }
    raw = negate_ranges(raw);
    raw.push_back({0, 0x1F});
    raw.push_back({'"', '"'});
    raw.push_back({'\\', '\\'});
    raw = negate_ranges(raw);
    if (!raw.empty()) alternatives.push_back({b_.codepoints(std::move(raw), false)});
    if (alternatives.empty()) {
      set_error("empty character class");
      return b_.empty();
    }
    return b_.group(std::move(alternatives));
  }

  Symbol parse_alternation(int depth) {
    if (depth > b_.limits().max_nesting) {
      set_error("groups nested deeper than " + std::to_string(b_.limits().max_nesting));
      return b_.empty();
    }
    std::vector<Sequence> alternatives;
    alternatives.push_back(parse_sequence(depth));
    while (b_.ok() && pos_ < p_.size() && p_[pos_] == '|') {
      ++pos_;
      alternatives.push_back(parse_sequence(depth));
    }
    return b_.group(std::move(alternatives));
  }

  Sequence parse_sequence(int depth) {
    Sequence seq;
    while (b_.ok() && pos_ < p_.size()) {
      const char c = p_[pos_];
      if (c == '|' || c == ')') break;
      if (c == '$') {
        if (depth == 0 && (pos_ + 1 == p_.size() || p_[pos_ + 1] == '|')) break;
        set_error("'$' is supported only at the end of the pattern");
        break;
      }
      if (c == '^') {
        set_error("'^' is supported only at the start of the pattern");
        break;
      }
      const Symbol atom = parse_atom(depth);
      if (!b_.ok()) break;
      seq.push_back(parse_quantifier(atom));
    }
    return seq;
  }

  Symbol parse_quantifier(Symbol atom) {
    if (pos_ >= p_.size()) return atom;
    int64_t min = 0, max = -1;
    const char c = p_[pos_];
    if (c == '*') {
      ++pos_;
    } else if (c == '+') {
      min = 1, ++pos_;
    } else if (c == '?') {
      max = 1, ++pos_;
    } else if (c == '{' && parse_braces(min, max)) {
    } else {
      return atom;
    }
    if (pos_ < p_.size() && p_[pos_] == '?') ++pos_;  // lazy: same language as greedy
    if (pos_ < p_.size() && (p_[pos_] == '*' || p_[pos_] == '+' || p_[pos_] == '?' || p_[pos_] == '{')) {
      set_error("nothing to repeat");
      return atom;
    }
    return b_.repeat(atom, min, max);
  }

  // {n}, {n,}, {n,m}; anything else is a literal '{' (as in ECMAScript's Annex B).
  bool parse_braces(int64_t& min, int64_t& max) {
    size_t p = pos_ + 1;
    auto number = [&](int64_t& out) {
      const size_t start = p;
      out = 0;
      while (p < p_.size() && std::isdigit(static_cast<unsigned char>(p_[p]))) {
        if (out < (int64_t{1} << 40)) out = out * 10 + (p_[p] - '0');
        ++p;
      }
      return p > start;
    };
    if (!number(min)) return false;
    max = min;
    if (p < p_.size() && p_[p] == ',') {
      ++p;
      if (!number(max)) max = -1;
    }
    if (p >= p_.size() || p_[p] != '}') return false;
    pos_ = p + 1;
    return true;
  }

  Symbol parse_atom(int depth) {
    const char c = p_[pos_];
    if (c == '(') {
      ++pos_;
      if (p_.substr(pos_, 2) == "?:") {
        pos_ += 2;
      } else if (p_.substr(pos_, 2) == "?<" && p_.substr(pos_, 3) != "?<=" && p_.substr(pos_, 3) != "?<!") {
        const size_t close = p_.find('>', pos_);
        if (close == std::string_view::npos) {
          set_error("unterminated group name");
          return b_.empty();
        }
        pos_ = close + 1;
      } else if (pos_ < p_.size() && p_[pos_] == '?') {
        set_error("lookaround assertions are not supported");
        return b_.empty();
      }
      const Symbol inner = parse_alternation(depth + 1);
      if (pos_ >= p_.size() || p_[pos_] != ')') {
        set_error("missing ')'");
        return inner;
      }
      ++pos_;
      return inner;
    }
    if (c == '[') return parse_class();
    if (c == '.') {
      ++pos_;
      return chars(kLineTerminators, true);
    }
    if (c == '*' || c == '+' || c == '?') {
      set_error("nothing to repeat");
      return b_.empty();
    }
    if (c == '\\') {
      std::vector<CodepointRange> ranges;
      bool negated = false;
      if (!parse_escape(ranges, negated, false)) return b_.empty();
      return chars(std::move(ranges), negated);
    }
    const int64_t cp = next_codepoint();
    if (cp < 0) return b_.empty();
    return chars({{static_cast<uint32_t>(cp), static_cast<uint32_t>(cp)}}, false);
  }

  int64_t next_codepoint() {
    const auto c = static_cast<unsigned char>(p_[pos_]);
    const int n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (n == 0 || pos_ + n > p_.size()) {
      set_error("invalid UTF-8");
      return -1;
    }
    int64_t cp = n == 1 ? c : c & (0xFF >> (n + 1));
    for (int k = 1; k < n; ++k) cp = (cp << 6) | (static_cast<unsigned char>(p_[pos_ + k]) & 0x3F);
    pos_ += n;
    return cp;
  }

  int64_t parse_hex(size_t digits) {
    if (pos_ + digits > p_.size()) return -1;
    int64_t v = 0;
    for (size_t i = 0; i < digits; ++i) {
      const char h = p_[pos_ + i];
      if (!std::isxdigit(static_cast<unsigned char>(h))) return -1;
      v = v * 16 + (std::isdigit(static_cast<unsigned char>(h)) ? h - '0' : (std::tolower(h) - 'a' + 10));
    }
    pos_ += digits;
    return v;
  }

  // After a backslash: a class escape (\d \w \s and negations) or one code point.
  bool parse_escape(std::vector<CodepointRange>& ranges, bool& negated, bool in_class) {
    ++pos_;
    if (pos_ >= p_.size()) {
      set_error("trailing backslash");
      return false;
    }
    const char e = p_[pos_++];
    auto one = [&](int64_t cp) {
      if (cp < 0 || cp > 0x10FFFF) {
        set_error("bad escape");
        return false;
      }
      ranges.push_back({static_cast<uint32_t>(cp), static_cast<uint32_t>(cp)});
      return true;
    };
    switch (e) {
      case 'd': ranges = kDigit; return true;
      case 'D': ranges = kDigit, negated = true; return true;
      case 'w': ranges = kWord; return true;
      case 'W': ranges = kWord, negated = true; return true;
      case 's': ranges = kSpace; return true;
      case 'S': ranges = kSpace, negated = true; return true;
      case 'n': return one('\n');
      case 'r': return one('\r');
      case 't': return one('\t');
      case 'f': return one('\f');
      case 'v': return one('\v');
      case '0': return one(0);
      case 'x': return one(parse_hex(2));
      case 'u':
        if (pos_ < p_.size() && p_[pos_] == '{') {
          const size_t close = p_.find('}', pos_);
          if (close == std::string_view::npos || close - pos_ > 7) return one(-1);
          ++pos_;
          const int64_t v = parse_hex(close - pos_);
          ++pos_;
          return one(v);
        }
        return one(parse_hex(4));
      case 'b':
        if (in_class) return one('\b');
        set_error("word boundary \\b is not supported");
        return false;
      case 'B': set_error("\\B is not supported"); return false;
      case 'c': set_error("control escapes \\c are not supported"); return false;
      default:
        if (std::isdigit(static_cast<unsigned char>(e))) {
          set_error("backreferences are not supported");
          return false;
        }
        if (std::isalpha(static_cast<unsigned char>(e))) {
          set_error(std::string("unknown escape \\") + e);
          return false;
        }
        --pos_;
        return one(next_codepoint());
    }
  }

  Symbol parse_class() {
    ++pos_;
    const bool negated = pos_ < p_.size() && p_[pos_] == '^';
    if (negated) ++pos_;
    std::vector<CodepointRange> ranges;
    // Reads one class member: a single code point (returned) or a class escape (added, -2).
    auto member = [&]() -> int64_t {
      if (p_[pos_] != '\\') return next_codepoint();
      std::vector<CodepointRange> sub;
      bool sub_negated = false;
      if (!parse_escape(sub, sub_negated, true)) return -1;
      if (!sub_negated && sub.size() == 1 && sub[0].lo == sub[0].hi) return sub[0].lo;
      if (sub_negated) sub = negate_ranges(sub);
      ranges.insert(ranges.end(), sub.begin(), sub.end());
      return -2;
    };
    while (b_.ok() && pos_ < p_.size() && p_[pos_] != ']') {
      const int64_t lo = member();
      if (lo == -1) return b_.empty();
      if (lo == -2) continue;
      if (pos_ + 1 < p_.size() && p_[pos_] == '-' && p_[pos_ + 1] != ']') {
        ++pos_;
        const int64_t hi = member();
        if (hi == -1) return b_.empty();
        if (hi == -2 || hi < lo) {
          set_error("bad range in character class");
          return b_.empty();
        }
        ranges.push_back({static_cast<uint32_t>(lo), static_cast<uint32_t>(hi)});
      } else {
        ranges.push_back({static_cast<uint32_t>(lo), static_cast<uint32_t>(lo)});
      }
    }
    if (pos_ >= p_.size()) {
      set_error("unterminated character class");
      return b_.empty();
    }
    ++pos_;
    if (!negated && ranges.empty()) {
      set_error("empty character class [] matches nothing");
      return b_.empty();
    }
    return chars(std::move(ranges), negated);
  }

  GrammarBuilder& b_;
  std::string text_;
  std::string_view p_;
  bool json_;
  bool unanchored_;
  size_t pos_ = 0;
  std::optional<Symbol> any_text_;
};

}  // namespace

Result<Symbol> build_regex(GrammarBuilder& builder, std::string_view pattern, bool json_string) {
  return RegexParser(builder, pattern, json_string, json_string).parse();
}

Symbol build_json_char(GrammarBuilder& builder, std::vector<CodepointRange> ranges, bool negated) {
  return RegexParser(builder, "", true, true).chars(std::move(ranges), negated);
}

namespace {

Result<Grammar> finish_regex(std::string_view pattern, GrammarLimits limits, bool unanchored) {
  GrammarBuilder b(limits);
  auto symbol = RegexParser(b, pattern, false, unanchored).parse();
  if (!symbol.ok()) return symbol.error();
  const int32_t root = b.define_rule("root", {Sequence{*symbol}});
  auto grammar = b.finish(root);
  if (!grammar.ok()) return Error{"regex: " + grammar.error().message};
  return grammar;
}

}  // namespace

Result<Grammar> compile_regex(std::string_view pattern, GrammarLimits limits) {
  return finish_regex(pattern, limits, false);
}

Result<Grammar> compile_regex_search(std::string_view pattern, GrammarLimits limits) {
  return finish_regex(pattern, limits, true);
}

}  // namespace deepinfer::grammar
