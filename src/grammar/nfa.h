// A regular grammar (what the regex front end builds: rules recur only on their own left edge,
// as unbounded repeats do) as a Thompson NFA over bytes, run by state-set simulation. Matching a
// text takes time linear in its length (times the NFA's size) whatever the pattern, where a
// backtracking matcher takes exponential time on nested quantifiers (`^(a+)+$`) and the Earley
// automaton's states grow with the text on ambiguous ones. The JSON Schema validator checks
// `pattern` with it.
#pragma once

#include <cstdint>
#include <string_view>
#include <utility>
#include <vector>

#include "core/result.h"
#include "grammar/grammar.h"

namespace deepinfer::grammar {

// Not thread-safe (match() keeps scratch state).
class Nfa {
 public:
  // Errors: a grammar whose NFA needs more than max_states states (too large once its shared
  // rules are expanded, or not regular: a rule that recurs other than on its left edge).
  static Result<Nfa> build(const Grammar& grammar, size_t max_states);

  // Whether the grammar matches the whole text. Errors: limits' cancellation or deadline, checked
  // at the start and every 4096 bytes.
  Result<bool> match(std::string_view text, const GrammarLimits& limits);

  size_t num_states() const { return states_.size(); }

 private:
  struct State {
    std::vector<int32_t> epsilon;                      // targets reached without input
    std::vector<std::pair<int32_t, int32_t>> on_byte;  // (terminal id, target)
  };
  // Adds to set every state its states reach by epsilon edges; each state once.
  void close(std::vector<int32_t>& set);

  std::vector<State> states_;  // [0] the start, [1] the accepting state
  std::vector<ByteSet> terminals_;
  std::vector<uint32_t> seen_;  // close(): a state is in the set when seen_ == generation_
  uint32_t generation_ = 0;
  std::vector<int32_t> stack_;
};

}  // namespace deepinfer::grammar
