// Earley closure (prediction, completion, nullable skipping after Aycock and Horspool) over
// interned item sets, and the interning that makes equal parse futures one state.
#include "grammar/automaton.h"

#include <algorithm>
#include <cstring>

#include "core/check.h"

namespace deepinfer::grammar {

size_t Automaton::ItemHash::operator()(const Item& it) const {
  uint64_t h = static_cast<uint32_t>(it.prod);
  h = h * 0x9E3779B97F4A7C15ull + static_cast<uint32_t>(it.dot);
  h = h * 0x9E3779B97F4A7C15ull + static_cast<uint32_t>(it.origin);
  // Final avalanche (MurmurHash3's fmix64): the table below indexes by the low bits.
  h = (h ^ (h >> 33)) * 0xFF51AFD7ED558CCDull;
  h = (h ^ (h >> 33)) * 0xC4CEB9FE1A85EC53ull;
  return static_cast<size_t>(h ^ (h >> 33));
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
  // Bytes in exactly the same terminals of this state scan the same items, so they share the
  // result: one closure per byte class instead of one per byte (a JSON string body has ~6).
  ByteSet same;
  same.bits[0] = same.bits[1] = same.bits[2] = same.bits[3] = ~uint64_t{0};
  for (const Item& it : items) {
    const Symbol s = symbol_at(it.prod, it.dot);
    if (!is_terminal(s)) continue;
    const ByteSet& t = terminals_[terminal_id(s)];
    const uint64_t flip = t.has(b) ? 0 : ~uint64_t{0};
    for (int w = 0; w < 4; ++w) same.bits[w] &= t.bits[w] ^ flip;
  }
  for (int w = 0; w < 4; ++w) same.bits[w] &= node.scan_bytes.bits[w];
  for (int c = 0; c < 256; ++c) {
    if (same.has(static_cast<uint8_t>(c))) (*node.next)[c] = next;
  }
  (*node.next)[b] = next;
  return next;
}

StateId Automaton::close_and_intern(std::vector<Item> work) {
  std::vector<Item> all;
  // Open addressing over indices into all, in reused buffers: a closure runs for every new
  // state, and a node-based set's allocations were most of its cost.
  std::vector<int32_t>& slots = seen_slots_;
  slots.assign(64, -1);
  auto find_slot = [&](const Item& it) {
    size_t h = ItemHash{}(it) & (slots.size() - 1);
    while (slots[h] >= 0 && !(all[static_cast<size_t>(slots[h])] == it)) h = (h + 1) & (slots.size() - 1);
    return h;
  };
  auto add = [&](const Item& it) {
    const size_t h = find_slot(it);
    if (slots[h] >= 0) return;
    slots[h] = static_cast<int32_t>(all.size());
    all.push_back(it);
    if (all.size() * 2 > slots.size()) {
      slots.assign(slots.size() * 2, -1);
      for (size_t k = 0; k < all.size(); ++k) slots[find_slot(all[k])] = static_cast<int32_t>(k);
    }
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
