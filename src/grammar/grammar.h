// Grammar IR: context-free rules over byte-level terminals (sets of bytes), built by the
// EBNF, regex and JSON Schema front ends and run by the Earley automaton (automaton.h).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include "core/result.h"

namespace deepinfer::grammar {

// A set of bytes; the one kind of terminal.
struct ByteSet {
  uint64_t bits[4] = {0, 0, 0, 0};
  void add(uint8_t b) { bits[b >> 6] |= uint64_t{1} << (b & 63); }
  void add_range(uint8_t lo, uint8_t hi) {
    for (int b = lo; b <= hi; ++b) add(static_cast<uint8_t>(b));
  }
  bool has(uint8_t b) const { return (bits[b >> 6] >> (b & 63)) & 1; }
  bool empty() const { return (bits[0] | bits[1] | bits[2] | bits[3]) == 0; }
  void merge(const ByteSet& o) {
    for (int i = 0; i < 4; ++i) bits[i] |= o.bits[i];
  }
  bool operator==(const ByteSet& o) const {
    return bits[0] == o.bits[0] && bits[1] == o.bits[1] && bits[2] == o.bits[2] && bits[3] == o.bits[3];
  }
};

// A symbol of a rule body: a rule id (>= 0) or a terminal (-1 - terminal id).
using Symbol = int32_t;
inline bool is_terminal(Symbol s) { return s < 0; }
inline int32_t terminal_id(Symbol s) { return -1 - s; }

using Sequence = std::vector<Symbol>;

struct Rule {
  std::string name;
  std::vector<Sequence> alternatives;  // an empty Sequence is the empty string
};

// An inclusive range of Unicode code points.
struct CodepointRange {
  uint32_t lo = 0;
  uint32_t hi = 0;
};

// Limits every front end honours, so hostile input fails fast instead of exhausting memory.
struct GrammarLimits {
  size_t max_symbols = 2'000'000;    // total symbols over all rule bodies
  size_t max_rules = 500'000;
  int max_nesting = 200;             // parentheses / schema nesting / recursion of the front ends
  uint32_t max_repeat = 100'000;     // the largest bound of a {m,n} repetition
  const std::atomic<bool>* cancelled = nullptr;  // checked while building; set by the compiler
  std::chrono::steady_clock::time_point deadline = std::chrono::steady_clock::time_point::max();
  // An error when the work must stop now: cancelled, or past the deadline (reads the clock).
  Result<void> check_time() const;
};

// The built grammar. Immutable after GrammarBuilder::finish(); rule 0.. are addressed by id.
struct Grammar {
  std::vector<Rule> rules;
  std::vector<ByteSet> terminals;
  int32_t root = 0;
  size_t num_symbols() const;
  // EBNF-like text for diagnostics and tests.
  std::string to_string() const;
};

// Builds a Grammar. Helpers return a Symbol that can be placed in any body. The first error
// (a limit or a cancellation) is sticky: later calls return a harmless symbol and finish()
// returns the error.
class GrammarBuilder {
 public:
  explicit GrammarBuilder(GrammarLimits limits = {}) : limits_(limits) {}

  const GrammarLimits& limits() const { return limits_; }
  bool ok() const { return error_.empty(); }
  void fail(std::string message);
  const std::string& error() const { return error_; }

  // A new rule without alternatives (for recursion: declare, reference, then define).
  int32_t declare_rule(std::string name);
  void set_alternatives(int32_t rule, std::vector<Sequence> alternatives);
  void add_alternative(int32_t rule, Sequence alternative);
  int32_t define_rule(std::string name, std::vector<Sequence> alternatives);
  // A rule whose body is the given alternatives, as a symbol.
  Symbol group(std::vector<Sequence> alternatives);
  bool rule_is_defined(int32_t rule) const;
  const std::string& rule_name(int32_t rule) const { return grammar_.rules[rule].name; }
  size_t num_rules() const { return grammar_.rules.size(); }

  Symbol terminal(const ByteSet& set);
  Symbol byte(uint8_t b);
  // Literal bytes appended to seq.
  void append_literal(Sequence& seq, std::string_view bytes);
  Symbol literal(std::string_view bytes);
  // Any one of the strings, factored into a trie so that a huge enum keeps Earley sets small.
  Symbol one_of_literals(std::vector<std::string> strings);
  // Any code point in ranges (or outside them when negated), UTF-8 encoded.
  Symbol codepoints(std::vector<CodepointRange> ranges, bool negated);
  Symbol empty();
  Symbol optional(Symbol s);
  // s repeated min..max times; max < 0 means unbounded. Unbounded repeats are left recursive
  // (cheap for Earley); bounded ones count with a chain of rules.
  Symbol repeat(Symbol s, int64_t min, int64_t max);

  Result<Grammar> finish(int32_t root);
  // Defines the rule "root" as top and finishes; an error's message is prefixed "<context>: ".
  Result<Grammar> finish_root(Symbol top, std::string_view context);

 private:
  bool charge(size_t num_symbols);
  std::string fresh_name(const char* stem);

  GrammarLimits limits_;
  Grammar grammar_;
  std::string error_;
  size_t num_symbols_ = 0;
  size_t name_counter_ = 0;
  size_t num_charges_ = 0;
  std::map<std::tuple<Symbol, int64_t, int64_t>, Symbol> repeats_;  // equal repeats share rules
};

// Code point ranges as sorted, disjoint, merged ranges; negation against all scalar values.
std::vector<CodepointRange> normalize_ranges(std::vector<CodepointRange> ranges);
std::vector<CodepointRange> negate_ranges(const std::vector<CodepointRange>& ranges);

// Appends the UTF-8 encoding of cp.
void append_utf8(std::string& out, uint32_t cp);

}  // namespace deepinfer::grammar
