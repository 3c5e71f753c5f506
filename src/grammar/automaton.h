// A lazily built deterministic automaton over bytes whose states are canonical Earley
// configurations: each state is an interned Earley item set whose item origins point at other
// interned sets (never chart positions), so two parses with the same future share one state and
// a step on a known (state, byte) is one table lookup.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "grammar/grammar.h"

namespace deepinfer::grammar {

using StateId = int32_t;
constexpr StateId kDeadState = -1;      // the byte cannot continue any parse
constexpr StateId kOverflowState = -2;  // the automaton hit its state limit (grammar too complex)

// Not thread-safe: callers serialise access (CompiledGrammar holds the lock).
class Automaton {
 public:
  // max_items bounds one Earley set (highly ambiguous grammars); past either limit a step
  // returns kOverflowState.
  explicit Automaton(const Grammar& grammar, size_t max_states = 500'000, size_t max_items = 20'000);

  StateId initial() const { return initial_; }
  // The state after byte b, kDeadState, or kOverflowState.
  StateId step(StateId state, uint8_t b) {
    Node& node = nodes_[state];
    if (!node.scan_bytes.has(b)) return kDeadState;
    if (node.next) {
      const StateId cached = (*node.next)[b];
      if (cached != kUnknown) return cached;
    }
    return step_slow(state, b);
  }
  // The grammar may end here (the root is complete).
  bool can_end(StateId state) const { return nodes_[state].can_end; }
  // Some byte may continue the parse.
  bool can_continue(StateId state) const { return !nodes_[state].scan_bytes.empty(); }
  const ByteSet& next_bytes(StateId state) const { return nodes_[state].scan_bytes; }
  size_t num_states() const { return nodes_.size(); }

 private:
  static constexpr StateId kUnknown = -3;
  static constexpr int32_t kSelf = -1;

  struct Item {
    int32_t prod;
    int32_t dot;
    int32_t origin;  // kSelf: this set; else an interned state
    bool operator<(const Item& o) const {
      return prod != o.prod ? prod < o.prod : dot != o.dot ? dot < o.dot : origin < o.origin;
    }
    bool operator==(const Item& o) const { return prod == o.prod && dot == o.dot && origin == o.origin; }
  };
  struct ItemHash {
    size_t operator()(const Item& it) const;
  };
  struct Node {
    std::vector<Item> items;  // sorted; no completed items
    bool can_end = false;
    ByteSet scan_bytes;
    StateId waiting_view = kUnknown;
    std::unique_ptr<std::array<StateId, 256>> next;
  };
  struct Production {
    int32_t lhs;    // -1 for the start production
    int32_t begin;  // into rhs_
    int32_t length;
  };

  Symbol symbol_at(int32_t prod, int32_t dot) const { return rhs_[prods_[prod].begin + dot]; }
  StateId step_slow(StateId state, uint8_t b);
  // Closes items under prediction and completion, then interns the set.
  StateId close_and_intern(std::vector<Item> items);
  StateId intern(std::vector<Item> items, bool can_end);
  StateId waiting_view(StateId state);

  std::vector<Production> prods_;
  std::vector<Symbol> rhs_;
  std::vector<std::vector<int32_t>> rule_prods_;
  std::vector<bool> nullable_;
  std::vector<ByteSet> terminals_;
  std::vector<Node> nodes_;
  std::unordered_map<std::string, StateId> index_;
  std::vector<int32_t> seen_slots_;  // close_and_intern's hash table, kept between calls
  size_t max_states_;
  size_t max_items_;
  StateId initial_ = kDeadState;
};

}  // namespace deepinfer::grammar
