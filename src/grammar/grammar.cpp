// GrammarBuilder and the UTF-8 encoding of code point ranges into byte-set sequences.
#include "grammar/grammar.h"

#include <algorithm>
#include <cstdio>
#include <functional>

#include "core/check.h"

namespace deepinfer::grammar {

namespace {

constexpr uint32_t kMaxCodepoint = 0x10FFFF;

int utf8_length(uint32_t cp) { return cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4; }

// Byte i (0-based) of the n-byte encoding of cp.
uint8_t utf8_byte(uint32_t cp, int n, int i) {
  static constexpr uint8_t kLead[5] = {0, 0, 0xC0, 0xE0, 0xF0};
  if (n == 1) return static_cast<uint8_t>(cp);
  const int shift = 6 * (n - 1 - i);
  if (i == 0) return static_cast<uint8_t>(kLead[n] | (cp >> shift));
  return static_cast<uint8_t>(0x80 | ((cp >> shift) & 0x3F));
}

// Splits [lo, hi] (same encoded length n) until every byte position is an independent range,
// then emits one byte-set sequence per piece.
void encode_range(uint32_t lo, uint32_t hi, int n, std::vector<std::vector<ByteSet>>& out) {
  for (int i = 1; i < n; ++i) {
    const uint32_t mask = (uint32_t{1} << (6 * i)) - 1;
    if ((lo & ~mask) != (hi & ~mask)) {
      if ((lo & mask) != 0) {
        encode_range(lo, lo | mask, n, out);
        encode_range((lo | mask) + 1, hi, n, out);
        return;
      }
      if ((hi & mask) != mask) {
        encode_range(lo, (hi & ~mask) - 1, n, out);
        encode_range(hi & ~mask, hi, n, out);
        return;
      }
    }
  }
  std::vector<ByteSet> seq(n);
  for (int i = 0; i < n; ++i) seq[i].add_range(utf8_byte(lo, n, i), utf8_byte(hi, n, i));
  out.push_back(std::move(seq));
}

}  // namespace

void append_utf8(std::string& out, uint32_t cp) {
  const int n = utf8_length(cp);
  for (int i = 0; i < n; ++i) out.push_back(static_cast<char>(utf8_byte(cp, n, i)));
}

std::vector<CodepointRange> normalize_ranges(std::vector<CodepointRange> ranges) {
  std::sort(ranges.begin(), ranges.end(), [](auto& a, auto& b) { return a.lo < b.lo; });
  std::vector<CodepointRange> out;
  for (const auto& r : ranges) {
    if (r.lo > r.hi) continue;
    if (!out.empty() && r.lo <= out.back().hi + 1) {
      out.back().hi = std::max(out.back().hi, r.hi);
    } else {
      out.push_back(r);
    }
  }
  return out;
}

std::vector<CodepointRange> negate_ranges(const std::vector<CodepointRange>& ranges) {
  std::vector<CodepointRange> out;
  uint32_t next = 0;
  for (const auto& r : normalize_ranges(ranges)) {
    if (r.lo > next) out.push_back({next, r.lo - 1});
    next = r.hi + 1;
  }
  if (next <= kMaxCodepoint) out.push_back({next, kMaxCodepoint});
  return out;
}

size_t Grammar::num_symbols() const {
  size_t n = 0;
  for (const auto& r : rules)
    for (const auto& a : r.alternatives) n += a.size() + 1;
  return n;
}

std::string Grammar::to_string() const {
  std::string out;
  auto print_set = [&](const ByteSet& set) {
    out += '[';
    for (int b = 0; b < 256; ++b) {
      if (!set.has(static_cast<uint8_t>(b))) continue;
      int e = b;
      while (e + 1 < 256 && set.has(static_cast<uint8_t>(e + 1))) ++e;
      char buf[16];
      std::snprintf(buf, sizeof buf, "\\x%02x", b);
      out += buf;
      if (e > b) {
        std::snprintf(buf, sizeof buf, "-\\x%02x", e);
        out += buf;
      }
      b = e;
    }
    out += ']';
  };
  for (size_t i = 0; i < rules.size(); ++i) {
    out += rules[i].name + " ::=";
    for (size_t a = 0; a < rules[i].alternatives.size(); ++a) {
      if (a > 0) out += " |";
      if (rules[i].alternatives[a].empty()) out += " \"\"";
      for (Symbol s : rules[i].alternatives[a]) {
        out += ' ';
        if (is_terminal(s)) {
          print_set(terminals[terminal_id(s)]);
        } else {
          out += rules[s].name;
        }
      }
    }
    out += '\n';
  }
  return out;
}

void GrammarBuilder::fail(std::string message) {
  if (error_.empty()) error_ = std::move(message);
}

Result<void> GrammarLimits::check_time() const {
  if (cancelled && cancelled->load(std::memory_order_relaxed)) return Error{"grammar compilation was cancelled"};
  if (std::chrono::steady_clock::now() > deadline) {
    return Error{"grammar compilation timed out (schema or grammar too complex)"};
  }
  return {};
}

bool GrammarBuilder::charge(size_t num_symbols) {
  if (!ok()) return false;
  // Cancellation is checked on every charge, the clock every 4096: cheap, and still
  // fine-grained enough for a timeout.
  const bool cancelled = limits_.cancelled && limits_.cancelled->load(std::memory_order_relaxed);
  if (cancelled || (++num_charges_ & 4095) == 0) {
    if (auto in_time = limits_.check_time(); !in_time.ok()) {
      fail(in_time.error().message);
      return false;
    }
  }
  num_symbols_ += num_symbols;
  if (num_symbols_ > limits_.max_symbols) {
    fail("grammar too large: more than " + std::to_string(limits_.max_symbols) + " symbols");
    return false;
  }
  if (grammar_.rules.size() > limits_.max_rules) {
    fail("grammar too large: more than " + std::to_string(limits_.max_rules) + " rules");
    return false;
  }
  return true;
}

std::string GrammarBuilder::fresh_name(const char* stem) {
  return std::string(stem) + "_" + std::to_string(name_counter_++);
}

int32_t GrammarBuilder::declare_rule(std::string name) {
  charge(1);
  grammar_.rules.push_back(Rule{std::move(name), {}});
  return static_cast<int32_t>(grammar_.rules.size() - 1);
}

void GrammarBuilder::set_alternatives(int32_t rule, std::vector<Sequence> alternatives) {
  size_t n = 0;
  for (const auto& a : alternatives) n += a.size() + 1;
  if (!charge(n)) return;
  grammar_.rules[rule].alternatives = std::move(alternatives);
}

void GrammarBuilder::add_alternative(int32_t rule, Sequence alternative) {
  if (!charge(alternative.size() + 1)) return;
  grammar_.rules[rule].alternatives.push_back(std::move(alternative));
}

int32_t GrammarBuilder::define_rule(std::string name, std::vector<Sequence> alternatives) {
  const int32_t id = declare_rule(std::move(name));
  set_alternatives(id, std::move(alternatives));
  return id;
}

Symbol GrammarBuilder::group(std::vector<Sequence> alternatives) {
  if (alternatives.size() == 1 && alternatives[0].size() == 1) return alternatives[0][0];
  return define_rule(fresh_name("g"), std::move(alternatives));
}

bool GrammarBuilder::rule_is_defined(int32_t rule) const { return !grammar_.rules[rule].alternatives.empty(); }

Symbol GrammarBuilder::terminal(const ByteSet& set) {
  for (size_t i = 0; i < grammar_.terminals.size(); ++i) {
    if (grammar_.terminals[i] == set) return -1 - static_cast<int32_t>(i);
  }
  grammar_.terminals.push_back(set);
  return -static_cast<int32_t>(grammar_.terminals.size());
}

Symbol GrammarBuilder::byte(uint8_t b) {
  ByteSet set;
  set.add(b);
  return terminal(set);
}

void GrammarBuilder::append_literal(Sequence& seq, std::string_view bytes) {
  for (char c : bytes) seq.push_back(byte(static_cast<uint8_t>(c)));
}

Symbol GrammarBuilder::literal(std::string_view bytes) {
  Sequence seq;
  append_literal(seq, bytes);
  return group({std::move(seq)});
}

Symbol GrammarBuilder::one_of_literals(std::vector<std::string> strings) {
  std::sort(strings.begin(), strings.end());
  strings.erase(std::unique(strings.begin(), strings.end()), strings.end());
  // Strings [begin, end) share their first depth bytes; returns the rule for the rest.
  std::function<Symbol(size_t, size_t, size_t)> build = [&](size_t begin, size_t end, size_t depth) -> Symbol {
    std::vector<Sequence> alternatives;
    size_t i = begin;
    if (strings[i].size() == depth) {
      alternatives.push_back({});
      ++i;
    }
    while (i < end && ok()) {
      size_t j = i + 1;
      while (j < end && strings[j][depth] == strings[i][depth]) ++j;
      if (j == i + 1 || depth >= 256) {  // past 256 shared bytes, stop factoring (bounds recursion)
        j = i + 1;
        Sequence seq;
        append_literal(seq, std::string_view(strings[i]).substr(depth));
        alternatives.push_back(std::move(seq));
      } else {
        alternatives.push_back({byte(static_cast<uint8_t>(strings[i][depth])), build(i, j, depth + 1)});
      }
      i = j;
    }
    return group(std::move(alternatives));
  };
  if (strings.empty()) {
    fail("an empty list of alternatives matches nothing");
    return empty();
  }
  return build(0, strings.size(), 0);
}

Symbol GrammarBuilder::empty() { return group({Sequence{}}); }

Symbol GrammarBuilder::codepoints(std::vector<CodepointRange> ranges, bool negated) {
  ranges = negated ? negate_ranges(ranges) : normalize_ranges(std::move(ranges));
  // Surrogates are not scalar values and have no UTF-8 encoding.
  std::vector<CodepointRange> scalar;
  for (const auto& r : ranges) {
    if (r.hi < 0xD800 || r.lo > 0xDFFF) {
      scalar.push_back(r);
      continue;
    }
    if (r.lo < 0xD800) scalar.push_back({r.lo, 0xD7FF});
    if (r.hi > 0xDFFF) scalar.push_back({0xE000, r.hi});
  }
  std::vector<std::vector<ByteSet>> seqs;
  for (auto r : scalar) {
    r.hi = std::min(r.hi, kMaxCodepoint);
    for (uint32_t lo = r.lo; lo <= r.hi;) {
      const int n = utf8_length(lo);
      const uint32_t end = n == 1 ? 0x7F : n == 2 ? 0x7FF : n == 3 ? 0xFFFF : kMaxCodepoint;
      const uint32_t hi = std::min(end, r.hi);
      encode_range(lo, hi, n, seqs);
      lo = hi + 1;
    }
  }
  if (seqs.empty()) {
    fail("empty character class: no code point can match");
    return empty();
  }
  // Merge the one-byte pieces into a single terminal (they are the common case).
  ByteSet ascii;
  std::vector<Sequence> alternatives;
  for (const auto& seq : seqs) {
    if (seq.size() == 1) {
      ascii.merge(seq[0]);
      continue;
    }
    Sequence s;
    for (const auto& set : seq) s.push_back(terminal(set));
    alternatives.push_back(std::move(s));
  }
  if (!ascii.empty()) alternatives.insert(alternatives.begin(), Sequence{terminal(ascii)});
  return group(std::move(alternatives));
}

Symbol GrammarBuilder::optional(Symbol s) { return group({Sequence{}, Sequence{s}}); }

Symbol GrammarBuilder::repeat(Symbol s, int64_t min, int64_t max) {
  if (min < 0 || (max >= 0 && max < min)) {
    fail("invalid repetition {" + std::to_string(min) + "," + std::to_string(max) + "}");
    return empty();
  }
  if (min > limits_.max_repeat || max > static_cast<int64_t>(limits_.max_repeat)) {
    fail("repetition bound " + std::to_string(std::max(min, max)) + " exceeds the limit of " +
         std::to_string(limits_.max_repeat));
    return empty();
  }
  const auto key = std::make_tuple(s, min, max);
  if (auto found = repeats_.find(key); found != repeats_.end()) return found->second;
  if (!charge(static_cast<size_t>(std::max(min, max) + 1))) return empty();
  Sequence seq(static_cast<size_t>(min), s);
  if (max < 0) {
    const int32_t star = declare_rule(fresh_name("star"));
    set_alternatives(star, {Sequence{}, Sequence{star, s}});
    seq.push_back(star);
  } else if (max > min) {
    // tail_k matches 0..k more copies.
    int32_t tail = define_rule(fresh_name("rep"), {Sequence{}, Sequence{s}});
    for (int64_t k = 2; k <= max - min && ok(); ++k) {
      tail = define_rule(fresh_name("rep"), {Sequence{}, Sequence{s, tail}});
    }
    seq.push_back(tail);
  }
  const Symbol result = group({std::move(seq)});
  repeats_.emplace(key, result);
  return result;
}

Result<Grammar> GrammarBuilder::finish(int32_t root) {
  if (!ok()) return Error{error_};
  for (const auto& rule : grammar_.rules) {
    if (rule.alternatives.empty()) return Error{"rule '" + rule.name + "' is referenced but never defined"};
  }
  DI_CHECK(root >= 0 && root < static_cast<int32_t>(grammar_.rules.size()));
  grammar_.root = root;
  return std::move(grammar_);
}

Result<Grammar> GrammarBuilder::finish_root(Symbol top, std::string_view context) {
  auto grammar = finish(define_rule("root", {Sequence{top}}));
  if (!grammar.ok()) return Error{std::string(context) + ": " + grammar.error().message};
  return grammar;
}

}  // namespace deepinfer::grammar
