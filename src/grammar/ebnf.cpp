// The EBNF front end (GBNF style: `name ::= body`, "literals", [classes], ., ( ), * + ? {m,n},
// # comments) and fixed choices.
#include "grammar/front_ends.h"

#include <cctype>
#include <unordered_map>

namespace deepinfer::grammar {

namespace {

class EbnfParser {
 public:
  EbnfParser(std::string_view text, GrammarLimits limits) : text_(text), b_(limits) {}

  Result<Grammar> parse(std::string_view root_rule) {
    skip_space();
    while (pos_ < text_.size() && b_.ok()) {
      const std::string name = parse_name();
      if (name.empty()) return error("expected a rule name");
      skip_space();
      if (text_.substr(pos_, 3) != "::=") return error("expected '::=' after rule name '" + name + "'");
      pos_ += 3;
      const int32_t rule = rule_id(name);
      if (b_.rule_is_defined(rule)) return error("rule '" + name + "' is defined twice");
      auto alternatives = parse_alternatives(0);
      if (!b_.ok()) break;
      if (alternatives.empty()) alternatives.push_back({});
      b_.set_alternatives(rule, std::move(alternatives));
      skip_space();
    }
    if (!b_.ok()) return Error{"EBNF: " + b_.error()};
    auto root = rules_.find(std::string(root_rule));
    if (root == rules_.end()) return Error{"EBNF: no rule named '" + std::string(root_rule) + "'"};
    auto grammar = b_.finish(root->second);
    if (!grammar.ok()) return Error{"EBNF: " + grammar.error().message};
    return grammar;
  }

 private:
  Error error(const std::string& what) {
    return Error{"EBNF: " + what + " at byte " + std::to_string(pos_)};
  }
  void set_error(const std::string& what) { b_.fail(what + " at byte " + std::to_string(pos_)); }

  void skip_space() {
    while (pos_ < text_.size()) {
      if (text_[pos_] == '#') {
        while (pos_ < text_.size() && text_[pos_] != '\n') ++pos_;
      } else if (std::isspace(static_cast<unsigned char>(text_[pos_]))) {
        ++pos_;
      } else {
        break;
      }
    }
  }
  static bool is_name_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-'; }
  std::string parse_name() {
    const size_t start = pos_;
    while (pos_ < text_.size() && is_name_char(text_[pos_])) ++pos_;
    return std::string(text_.substr(start, pos_ - start));
  }
  // A name followed by ::= starts the next rule.
  bool at_rule_start() {
    size_t p = pos_;
    while (p < text_.size() && is_name_char(text_[p])) ++p;
    if (p == pos_) return false;
    while (p < text_.size() && (text_[p] == ' ' || text_[p] == '\t' || text_[p] == '\n' || text_[p] == '\r')) ++p;
    return text_.substr(p, 3) == "::=";
  }
  int32_t rule_id(const std::string& name) {
    auto [it, inserted] = rules_.try_emplace(name, 0);
    if (inserted) it->second = b_.declare_rule(name);
    return it->second;
  }

  std::vector<Sequence> parse_alternatives(int depth) {
    if (depth > b_.limits().max_nesting) {
      set_error("nesting deeper than " + std::to_string(b_.limits().max_nesting));
      return {};
    }
    std::vector<Sequence> alternatives;
    alternatives.push_back(parse_sequence(depth));
    while (b_.ok()) {
      skip_space();
      if (pos_ >= text_.size() || text_[pos_] != '|') break;
      ++pos_;
      alternatives.push_back(parse_sequence(depth));
    }
    return alternatives;
  }

  Sequence parse_sequence(int depth) {
    Sequence seq;
    while (b_.ok()) {
      skip_space();
      if (pos_ >= text_.size()) break;
      const char c = text_[pos_];
      if (c == '|' || c == ')' || at_rule_start()) break;
      Symbol s = parse_primary(depth);
      if (!b_.ok()) break;
      s = parse_quantifier(s);
      if (s != kNoSymbol) seq.push_back(s);
    }
    return seq;
  }

  static constexpr Symbol kNoSymbol = INT32_MAX;

  Symbol parse_primary(int depth) {
    const char c = text_[pos_];
    if (c == '"') return parse_literal();
    if (c == '[') return parse_class();
    if (c == '.') {
      ++pos_;
      return b_.codepoints({}, true);
    }
    if (c == '(') {
      ++pos_;
      auto alternatives = parse_alternatives(depth + 1);
      skip_space();
      if (pos_ >= text_.size() || text_[pos_] != ')') {
        set_error("expected ')'");
        return 0;
      }
      ++pos_;
      return b_.group(std::move(alternatives));
    }
    if (is_name_char(c)) return rule_id(parse_name());
    set_error(std::string("unexpected character '") + c + "'");
    return 0;
  }

  Symbol parse_quantifier(Symbol s) {
    if (pos_ >= text_.size()) return s;
    const char c = text_[pos_];
    if (c == '*') return ++pos_, b_.repeat(s, 0, -1);
    if (c == '+') return ++pos_, b_.repeat(s, 1, -1);
    if (c == '?') return ++pos_, b_.optional(s);
    if (c != '{') return s;
    ++pos_;
    const int64_t min = parse_int();
    int64_t max = min;
    if (pos_ < text_.size() && text_[pos_] == ',') {
      ++pos_;
      max = pos_ < text_.size() && text_[pos_] == '}' ? -1 : parse_int();
    }
    if (pos_ >= text_.size() || text_[pos_] != '}' || min < 0) {
      set_error("malformed repetition {m,n}");
      return s;
    }
    ++pos_;
    return b_.repeat(s, min, max);
  }

  int64_t parse_int() {
    int64_t v = 0;
    const size_t start = pos_;
    while (pos_ < text_.size() && std::isdigit(static_cast<unsigned char>(text_[pos_])) && v < (int64_t{1} << 40)) {
      v = v * 10 + (text_[pos_++] - '0');
    }
    return pos_ == start ? -1 : v;
  }

  // One code point, after a backslash when escaped; -1 on error.
  int64_t parse_char() {
    if (pos_ >= text_.size()) return -1;
    const auto c = static_cast<unsigned char>(text_[pos_]);
    if (c != '\\') {
      const int n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
      if (n == 0 || pos_ + n > text_.size()) return -1;
      int64_t cp = n == 1 ? c : c & (0xFF >> (n + 1));
      for (int k = 1; k < n; ++k) cp = (cp << 6) | (static_cast<unsigned char>(text_[pos_ + k]) & 0x3F);
      pos_ += n;
      return cp;
    }
    if (++pos_ >= text_.size()) return -1;
    const char e = text_[pos_++];
    switch (e) {
      case 'n': return '\n';
      case 't': return '\t';
      case 'r': return '\r';
      case '0': return 0;
      case 'x': return parse_hex(2);
      case 'u': return parse_hex(4);
      case 'U': return parse_hex(8);
      default: return static_cast<unsigned char>(e);
    }
  }
  int64_t parse_hex(int digits) {
    int64_t v = 0;
    for (int i = 0; i < digits; ++i) {
      if (pos_ >= text_.size() || !std::isxdigit(static_cast<unsigned char>(text_[pos_]))) return -1;
      v = v * 16 + std::stoi(std::string(1, text_[pos_++]), nullptr, 16);
    }
    return v > 0x10FFFF ? -1 : v;
  }

  Symbol parse_literal() {
    ++pos_;
    std::string bytes;
    while (pos_ < text_.size() && text_[pos_] != '"') {
      const int64_t cp = parse_char();
      if (cp < 0) {
        set_error("bad character or escape in string literal");
        return 0;
      }
      append_utf8(bytes, static_cast<uint32_t>(cp));
    }
    if (pos_ >= text_.size()) {
      set_error("unterminated string literal");
      return 0;
    }
    ++pos_;
    if (bytes.empty()) return kNoSymbol;
    return b_.literal(bytes);
  }

  Symbol parse_class() {
    ++pos_;
    const bool negated = pos_ < text_.size() && text_[pos_] == '^';
    if (negated) ++pos_;
    std::vector<CodepointRange> ranges;
    while (pos_ < text_.size() && text_[pos_] != ']') {
      const int64_t lo = parse_char();
      int64_t hi = lo;
      if (pos_ + 1 < text_.size() && text_[pos_] == '-' && text_[pos_ + 1] != ']') {
        ++pos_;
        hi = parse_char();
      }
      if (lo < 0 || hi < lo) {
        set_error("bad character class");
        return 0;
      }
      ranges.push_back({static_cast<uint32_t>(lo), static_cast<uint32_t>(hi)});
    }
    if (pos_ >= text_.size()) {
      set_error("unterminated character class");
      return 0;
    }
    ++pos_;
    return b_.codepoints(std::move(ranges), negated);
  }

  std::string_view text_;
  size_t pos_ = 0;
  GrammarBuilder b_;
  std::unordered_map<std::string, int32_t> rules_;
};

}  // namespace

Result<Grammar> compile_ebnf(std::string_view text, std::string_view root_rule, GrammarLimits limits) {
  return EbnfParser(text, limits).parse(root_rule);
}

Result<Grammar> compile_choice(const std::vector<std::string>& choices, GrammarLimits limits) {
  if (choices.empty()) return Error{"choice: the list of choices is empty"};
  GrammarBuilder b(limits);
  const int32_t root = b.define_rule("root", {Sequence{b.one_of_literals(choices)}});
  auto grammar = b.finish(root);
  if (!grammar.ok()) return Error{"choice: " + grammar.error().message};
  return grammar;
}

}  // namespace deepinfer::grammar
