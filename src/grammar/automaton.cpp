// Earley closure (prediction, completion, nullable skipping after Aycock and Horspool) over
// interned item sets, and the interning that makes equal parse futures one state.
#include "grammar/automaton.h"

#include <algorithm>
#include <cstring>
#include <unordered_set>

#include "core/check.h"

namespace deepinfer::grammar {

size_t Automaton::ItemHash::operator()(const Item& it) const {
  uint64_t h = static_cast<uint32_t>(it.prod);
  h = h * 0x9E3779B97F4A7C15ull + static_cast<uint32_t>(it.dot);
  h = h * 0x9E3779B97F4A7C15ull + static_cast<uint32_t>(it.origin);
  return static_cast<size_t>(h ^ (h >> 29));
}

Automaton::Automaton(const Grammar& grammar, size_t max_states, size_t max_items)
    : terminals_(grammar.terminals), max_states_(max_states), max_items_(max_items) {
  const size_t num_rules = grammar.rules.size();
  rule_prods_.resize(num_rules);
  prods_.push_back({-1, 0, 1});
  rhs_.push_back(grammar.root);
  for (size_t r = 0; r < num_rules; ++r) {
    for (const auto& alt : grammar.rules[r].alternatives) {
      rule_prods_[r].push_back(static_cast<int32_t>(prods_.size()));
      prods_.push_back({static_cast<int32_t>(r), static_cast<int32_t>(rhs_.size()), static_cast<int32_t>(alt.size())});
      rhs_.insert(rhs_.end(), alt.begin(), alt.end());
    }
  }
  // Nullable rules by fixed point.
  nullable_.assign(num_rules, false);
  for (bool changed = true; changed;) {
    changed = false;
    for (size_t p = 1; p < prods_.size(); ++p) {
      if (nullable_[prods_[p].lhs]) continue;
      bool all = true;
      for (int32_t i = 0; i < prods_[p].length && all; ++i) {
        const Symbol s = rhs_[prods_[p].begin + i];
        all = !is_terminal(s) && nullable_[s];
      }
      if (all) {
        nullable_[prods_[p].lhs] = true;
        changed = true;
      }
    }
  }
  initial_ = close_and_intern({Item{0, 0, kSelf}});
}

StateId Automaton::waiting_view(StateId state) {
  if (nodes_[state].waiting_view != kUnknown) return nodes_[state].waiting_view;
  std::vector<Item> waiting;
  for (const Item& it : nodes_[state].items) {
    if (!is_terminal(symbol_at(it.prod, it.dot))) waiting.push_back(it);
  }
  const StateId view = intern(std::move(waiting), false);
  if (view >= 0) nodes_[state].waiting_view = view;
  return view;
}

StateId Automaton::step_slow(StateId state, uint8_t b) {
  std::vector<Item> scanned;
  StateId origin_view = kUnknown;
  // Copy: interning below may reallocate nodes_.
  const std::vector<Item> items = nodes_[state].items;
  for (const Item& it : items) {
    const Symbol s = symbol_at(it.prod, it.dot);
    if (!is_terminal(s) || !terminals_[terminal_id(s)].has(b)) continue;
    int32_t origin = it.origin;
    if (origin == kSelf) {
      if (origin_view == kUnknown) origin_view = waiting_view(state);
      if (origin_view < 0) return origin_view;
      origin = origin_view;
    }
    scanned.push_back(Item{it.prod, it.dot + 1, origin});
  }
  const StateId next = scanned.empty() ? kDeadState : close_and_intern(std::move(scanned));
  if (next == kOverflowState) return next;
  Node& node = nodes_[state];
  if (!node.next) {
    node.next = std::make_unique<std::array<StateId, 256>>();
    node.next->fill(kUnknown);
  }
  (*node.next)[b] = next;
  return next;
}

StateId Automaton::close_and_intern(std::vector<Item> work) {
  std::vector<Item> all;
  std::unordered_set<Item, ItemHash> seen;
  auto add = [&](const Item& it) {
    if (seen.insert(it).second) all.push_back(it);
  };
  for (const Item& it : work) add(it);
  bool can_end = false;
  for (size_t i = 0; i < all.size(); ++i) {
    if (all.size() > max_items_) return kOverflowState;
    const Item it = all[i];
    const Production& prod = prods_[it.prod];
    if (it.dot == prod.length) {
      if (prod.lhs < 0) {
        can_end = true;
        continue;
      }
      if (it.origin == kSelf) {
        for (size_t j = 0; j < all.size(); ++j) {
          const Item w = all[j];
          if (w.dot < prods_[w.prod].length && symbol_at(w.prod, w.dot) == prod.lhs) add(Item{w.prod, w.dot + 1, w.origin});
        }
        continue;
      }
      const std::vector<Item>& waiting = nodes_[it.origin].items;  // no interning until the end
      for (const Item& w : waiting) {
        if (symbol_at(w.prod, w.dot) != prod.lhs) continue;
        add(Item{w.prod, w.dot + 1, w.origin == kSelf ? it.origin : w.origin});
      }
      continue;
    }
    const Symbol s = symbol_at(it.prod, it.dot);
    if (is_terminal(s)) continue;
    for (int32_t q : rule_prods_[s]) add(Item{q, 0, kSelf});
    if (nullable_[s]) add(Item{it.prod, it.dot + 1, it.origin});
  }
  std::vector<Item> kept;
  for (const Item& it : all) {
    if (it.dot < prods_[it.prod].length) kept.push_back(it);
  }
  if (kept.empty() && !can_end) return kDeadState;
  return intern(std::move(kept), can_end);
}

StateId Automaton::intern(std::vector<Item> items, bool can_end) {
  std::sort(items.begin(), items.end());
  items.erase(std::unique(items.begin(), items.end()), items.end());
  std::string key(items.size() * sizeof(Item) + 1, '\0');
  if (!items.empty()) std::memcpy(key.data(), items.data(), items.size() * sizeof(Item));
  key.back() = can_end ? '\1' : '\0';
  auto found = index_.find(key);
  if (found != index_.end()) return found->second;
  if (nodes_.size() >= max_states_) return kOverflowState;
  Node node;
  node.can_end = can_end;
  for (const Item& it : items) {
    const Symbol s = symbol_at(it.prod, it.dot);
    if (is_terminal(s)) node.scan_bytes.merge(terminals_[terminal_id(s)]);
  }
  node.items = std::move(items);
  const StateId id = static_cast<StateId>(nodes_.size());
  nodes_.push_back(std::move(node));
  index_.emplace(std::move(key), id);
  return id;
}

}  // namespace deepinfer::grammar
