// Nfa: Thompson's construction over the grammar's rules (expanded in place, left recursion as a
// loop) and the state-set simulation.
#include "grammar/nfa.h"

#include <algorithm>

namespace deepinfer::grammar {

Result<Nfa> Nfa::build(const Grammar& grammar, size_t max_states) {
  Nfa nfa;
  nfa.terminals_ = grammar.terminals;
  nfa.states_.resize(2);
  // A symbol still to place between two states. A worklist, not recursion: a bounded repeat is a
  // chain of rules as long as its bound.
  struct Placement {
    Symbol symbol;
    int32_t from;
    int32_t to;
  };
  std::vector<Placement> work = {{grammar.root, 0, 1}};
  auto new_state = [&] {
    nfa.states_.emplace_back();
    return static_cast<int32_t>(nfa.states_.size() - 1);
  };
  // seq[begin..] from `from` to `to`, through fresh states between its symbols.
  auto place_sequence = [&](const Sequence& seq, size_t begin, int32_t from, int32_t to) {
    if (begin == seq.size()) {
      nfa.states_[static_cast<size_t>(from)].epsilon.push_back(to);
      return;
    }
    int32_t at = from;
    for (size_t i = begin; i < seq.size(); ++i) {
      const int32_t next = i + 1 == seq.size() ? to : new_state();
      work.push_back({seq[i], at, next});
      at = next;
    }
  };
  while (!work.empty()) {
    // Also what stops a rule that recurs other than on its left edge: it expands without end.
    if (nfa.states_.size() > max_states) {
      return Error{"more than " + std::to_string(max_states) + " automaton states"};
    }
    const Placement p = work.back();
    work.pop_back();
    if (is_terminal(p.symbol)) {
      nfa.states_[static_cast<size_t>(p.from)].on_byte.emplace_back(terminal_id(p.symbol), p.to);
      continue;
    }
    const Rule& rule = grammar.rules[static_cast<size_t>(p.symbol)];
    const auto recurs = [&](const Sequence& alt) { return !alt.empty() && alt.front() == p.symbol; };
    // R -> R X | Y is Y X*: the Y alternatives lead into a loop state, the X tails go round it.
    const bool left_recursive = std::any_of(rule.alternatives.begin(), rule.alternatives.end(), recurs);
    const int32_t loop = left_recursive ? new_state() : p.to;
    if (left_recursive) nfa.states_[static_cast<size_t>(loop)].epsilon.push_back(p.to);
    for (const Sequence& alt : rule.alternatives) {
      if (recurs(alt)) {
        place_sequence(alt, 1, loop, loop);
      } else {
        place_sequence(alt, 0, p.from, loop);
      }
    }
  }
  return nfa;
}

void Nfa::close(std::vector<int32_t>& set) {
  if (++generation_ == 0) {  // wrapped: stale stamps could look current
    std::fill(seen_.begin(), seen_.end(), 0);
    generation_ = 1;
  }
  seen_.resize(states_.size());
  stack_.assign(set.begin(), set.end());
  set.clear();
  while (!stack_.empty()) {
    const int32_t s = stack_.back();
    stack_.pop_back();
    if (seen_[static_cast<size_t>(s)] == generation_) continue;
    seen_[static_cast<size_t>(s)] = generation_;
    set.push_back(s);
    const auto& epsilon = states_[static_cast<size_t>(s)].epsilon;
    stack_.insert(stack_.end(), epsilon.begin(), epsilon.end());
  }
}

Result<bool> Nfa::match(std::string_view text, const GrammarLimits& limits) {
  std::vector<int32_t> current = {0};
  std::vector<int32_t> next;
  close(current);
  for (size_t i = 0; i < text.size() && !current.empty(); ++i) {
    if ((i & 4095) == 0) DI_TRY(limits.check_time());  // also once per text: a validator checks many
    const auto b = static_cast<uint8_t>(text[i]);
    next.clear();
    for (int32_t s : current) {
      for (const auto& [terminal, target] : states_[static_cast<size_t>(s)].on_byte) {
        if (terminals_[static_cast<size_t>(terminal)].has(b)) next.push_back(target);
      }
    }
    close(next);
    std::swap(current, next);
  }
  return std::find(current.begin(), current.end(), 1) != current.end();
}

}  // namespace deepinfer::grammar
