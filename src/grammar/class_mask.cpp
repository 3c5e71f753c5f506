// Token masks by character class: when most ASCII bytes move a state to one common state, the
// tokens made only of those characters (and, when they agree, of well-formed multi-byte UTF-8)
// are decided by their length alone along the chain of states the class leads through (a JSON
// string body loops; a bounded one counts down). Their mask is precomputed per vocabulary
// (token_classes.h); only the tokens that leave the class are walked.
#include <algorithm>
#include <array>
#include <bit>
#include <cstring>

#include "grammar/matcher.h"
#include "grammar/token_classes.h"

namespace deepinfer::grammar {

namespace {

// Below this many class bytes the trie walk prunes as well as the class split would.
constexpr int kMinClassBytes = 32;
// Past this many tokens to walk one by one, the trie walk (which shares prefixes) is cheaper.
constexpr size_t kMaxSingleWalks = 20'000;
// A step result that is neither a state, dead, nor overflow: the bytes disagree.
constexpr StateId kMixed = -100;

}  // namespace

bool CompiledGrammar::walk_token(StateId from, const std::string& bytes, size_t pos, bool& overflow) {
  for (; pos < bytes.size(); ++pos) {
    from = automaton_.step(from, static_cast<uint8_t>(bytes[pos]));
    if (from < 0) {
      overflow = from == kOverflowState;
      return false;
    }
  }
  return true;
}

StateId CompiledGrammar::class_target(StateId from, const ByteSet& ascii, bool multibyte) {
  StateId target = kMixed;
  bool first = true;
  for (int b = 0; b < 128; ++b) {
    if (!ascii.has(static_cast<uint8_t>(b))) continue;
    const StateId next = automaton_.step(from, static_cast<uint8_t>(b));
    if (next == kOverflowState) return next;
    if (!first && next != target) return kMixed;
    target = next;
    first = false;
  }
  if (!multibyte) return target;
  const StateId m = multibyte_target(from);
  return m == kOverflowState ? m : m == target ? target : kMixed;
}

StateId CompiledGrammar::multibyte_target(StateId from) {
  bool any_dead = false;
  bool any_live = false;
  for (int b = 0xC2; b <= 0xF4; ++b) {
    const StateId next = automaton_.step(from, static_cast<uint8_t>(b));
    if (next == kOverflowState) return next;
    (next == kDeadState ? any_dead : any_live) = true;
  }
  if (!any_live) return kDeadState;
  if (any_dead) return kMixed;
  StateId target = kMixed;
  std::vector<StateId> frontier, next_frontier;
  for (const Utf8Form& form : utf8_forms()) {
    frontier.assign(1, from);
    for (int k = 0; k < form.length; ++k) {
      next_frontier.clear();
      for (StateId s : frontier) {
        for (int b = form.lo[k]; b <= form.hi[k]; ++b) {
          const StateId next = automaton_.step(s, static_cast<uint8_t>(b));
          if (next == kOverflowState) return next;
          if (next == kDeadState) return kMixed;
          if (std::find(next_frontier.begin(), next_frontier.end(), next) == next_frontier.end()) {
            next_frontier.push_back(next);
          }
        }
      }
      frontier.swap(next_frontier);
    }
    if (frontier.size() != 1 || (target != kMixed && frontier[0] != target)) return kMixed;
    target = frontier[0];
  }
  return target;
}

CompiledGrammar::ClassMask CompiledGrammar::fill_mask_by_class(StateId state, uint32_t* words) {
  // The class: the ASCII bytes that share the most common live successor. Too few ASCII bytes
  // continue at all: decided without stepping (a step can be a costly closure).
  const ByteSet& live = automaton_.next_bytes(state);
  if (std::popcount(live.bits[0]) + std::popcount(live.bits[1]) < kMinClassBytes) {
    return ClassMask::kNotApplicable;
  }
  std::array<StateId, 128> next{};
  for (int b = 0; b < 128; ++b) {
    next[b] = automaton_.step(state, static_cast<uint8_t>(b));
    if (next[b] == kOverflowState) return ClassMask::kNotApplicable;
  }
  std::vector<std::pair<StateId, int>> counts;  // few distinct successors
  for (int b = 0; b < 128; ++b) {
    if (next[b] < 0) continue;
    auto found = std::find_if(counts.begin(), counts.end(), [&](const auto& c) { return c.first == next[b]; });
    if (found == counts.end()) {
      counts.emplace_back(next[b], 1);
    } else {
      ++found->second;
    }
  }
  StateId target = kDeadState;
  int best = 0;
  for (const auto& [s, n] : counts) {
    if (n > best) best = n, target = s;
  }
  if (best < kMinClassBytes) return ClassMask::kNotApplicable;
  ByteSet own;
  for (int b = 0; b < 128; ++b) {
    if (next[b] == target) own.add(static_cast<uint8_t>(b));
  }
  CharClass cc;
  const auto& standard = standard_ascii_classes();
  auto within = std::find_if(standard.begin(), standard.end(), [&](const ByteSet& set) {
    return (set.bits[0] & ~own.bits[0]) == 0 && (set.bits[1] & ~own.bits[1]) == 0;
  });
  if (within == standard.end()) return ClassMask::kNotApplicable;
  cc.ascii = *within;
  const StateId m = multibyte_target(state);
  if (m == kOverflowState) return ClassMask::kNotApplicable;
  cc.multibyte = m == target;

  // chain[q]: the state after q class characters. It ends in a loop (every later character
  // stays on the last state), in a dead end (every class character is rejected), or open
  // (characters disagree, or the chain reached kMaxCounted): past an open end, walk.
  enum class End : uint8_t { kLoop, kDeadEnd, kOpen };
  std::vector<StateId> chain = {state};
  End end = End::kOpen;
  if (target == state) {
    end = End::kLoop;
  } else {
    chain.push_back(target);
    while (static_cast<int>(chain.size()) <= TokenClassIndex::kMaxCounted) {
      const StateId u = class_target(chain.back(), cc.ascii, cc.multibyte);
      if (u == kOverflowState) return ClassMask::kNotApplicable;
      if (u == kMixed) break;
      if (u == kDeadState || u == chain.back()) {
        end = u == kDeadState ? End::kDeadEnd : End::kLoop;
        break;
      }
      chain.push_back(u);
    }
  }
  const auto last = static_cast<int32_t>(chain.size() - 1);
  const auto index = vocab_->token_classes().get(*vocab_, cc);
  const size_t open_inside = end == End::kOpen ? index->inside_ids.size() - index->first_with_count[last + 1] : 0;
  if (open_inside > kMaxSingleWalks) return ClassMask::kNotApplicable;

  const size_t num_bytes = static_cast<size_t>(vocab_->num_mask_words()) * sizeof(uint32_t);
  std::memcpy(words, end == End::kLoop ? index->inside_mask.data() : index->prefix_masks[last].data(), num_bytes);
  auto allow = [&](int32_t id) { words[id >> 5] |= uint32_t{1} << (id & 31); };
  bool overflow = false;
  // Inside tokens longer than an open chain: from its last state, at their character `last`.
  if (end == End::kOpen) {
    for (size_t k = index->first_with_count[last + 1]; k < index->inside_ids.size(); ++k) {
      const std::string& bytes = vocab_->token_bytes(index->inside_ids[k]);
      if (walk_token(chain.back(), bytes, codepoint_offset(bytes, last), overflow)) allow(index->inside_ids[k]);
      if (overflow) return ClassMask::kOverflow;
    }
  }
  // Exits, grouped by (code point, leaving byte): one step decides a whole group when dead.
  for (const auto& group : index->exit_groups) {
    const int32_t q = group.codepoint;
    if (q > last && end == End::kDeadEnd) break;  // sorted by q: the rest die on the chain too
    if (q > last && end == End::kOpen) {
      for (uint32_t k = group.begin; k < group.end; ++k) {
        const std::string& bytes = vocab_->token_bytes(index->exits[k].id);
        if (walk_token(chain.back(), bytes, codepoint_offset(bytes, last), overflow)) allow(index->exits[k].id);
        if (overflow) return ClassMask::kOverflow;
      }
      continue;
    }
    const StateId after = automaton_.step(chain[static_cast<size_t>(std::min(q, last))], group.byte);
    if (after == kOverflowState) return ClassMask::kOverflow;
    if (after == kDeadState) continue;
    for (uint32_t k = group.begin; k < group.end; ++k) {
      const auto& e = index->exits[k];
      if (walk_token(after, vocab_->token_bytes(e.id), static_cast<size_t>(e.byte_pos) + 1, overflow)) allow(e.id);
      if (overflow) return ClassMask::kOverflow;
    }
  }
  return ClassMask::kDone;
}

}  // namespace deepinfer::grammar
