// Token masks per automaton state (cached per state, LRU by bytes): by character class
// (class_mask.cpp) or one trie walk; and the matcher's history of states for rollback.
#include "grammar/matcher.h"

#include <cstring>

#include "core/check.h"

namespace deepinfer::grammar {

CompiledGrammar::CompiledGrammar(Grammar grammar, std::shared_ptr<const TokenVocab> vocab, size_t mask_cache_bytes)
    : grammar_(std::move(grammar)), vocab_(std::move(vocab)), automaton_(grammar_),
      mask_cache_bytes_(mask_cache_bytes) {}

StateId CompiledGrammar::initial() {
  std::lock_guard lock(mutex_);
  return automaton_.initial();
}

bool CompiledGrammar::can_end(StateId state) {
  std::lock_guard lock(mutex_);
  return automaton_.can_end(state);
}

bool CompiledGrammar::can_continue(StateId state) {
  std::lock_guard lock(mutex_);
  return automaton_.can_continue(state);
}

StateId CompiledGrammar::advance(StateId state, std::string_view bytes) {
  std::lock_guard lock(mutex_);
  for (char c : bytes) {
    state = automaton_.step(state, static_cast<uint8_t>(c));
    if (state < 0) return state;
  }
  return state;
}

bool CompiledGrammar::fill_mask(StateId state, uint32_t* words) {
  const size_t num_words = static_cast<size_t>(vocab_->num_mask_words());
  std::lock_guard lock(mutex_);
  if (auto found = masks_.find(state); found != masks_.end()) {
    lru_.splice(lru_.begin(), lru_, found->second.second);
    std::memcpy(words, found->second.first.data(), num_words * sizeof(uint32_t));
    return true;
  }
  const ClassMask by_class = fill_mask_by_class(state, words);
  if (by_class == ClassMask::kOverflow) return false;
  if (by_class == ClassMask::kNotApplicable && !walk_trie(state, words)) return false;
  if (automaton_.can_end(state)) {
    for (int32_t id : vocab_->stop_ids()) words[id >> 5] |= uint32_t{1} << (id & 31);
  }
  const size_t entry_bytes = num_words * sizeof(uint32_t);
  if (entry_bytes <= mask_cache_bytes_) {
    while ((masks_.size() + 1) * entry_bytes > mask_cache_bytes_) {
      masks_.erase(lru_.back());
      lru_.pop_back();
    }
    lru_.push_front(state);
    masks_.emplace(state, std::make_pair(std::vector<uint32_t>(words, words + num_words), lru_.begin()));
  }
  return true;
}

bool CompiledGrammar::walk_trie(StateId state, uint32_t* words) {
  std::memset(words, 0, static_cast<size_t>(vocab_->num_mask_words()) * sizeof(uint32_t));
  const TokenVocab::Trie& trie = vocab_->trie();
  walk_states_.resize(static_cast<size_t>(trie.max_depth) + 1);
  walk_states_[0] = state;
  const auto num_nodes = static_cast<int32_t>(trie.byte.size());
  for (int32_t i = 1; i < num_nodes;) {
    const int depth = trie.depth[i];
    const StateId next = automaton_.step(walk_states_[depth - 1], trie.byte[i]);
    if (next < 0) {
      if (next == kOverflowState) return false;
      i = trie.subtree_end[i];
      continue;
    }
    walk_states_[depth] = next;
    for (int32_t k = trie.tokens_begin[i]; k < trie.tokens_begin[i + 1]; ++k) {
      const int32_t id = trie.token_ids[k];
      words[id >> 5] |= uint32_t{1} << (id & 31);
    }
    ++i;
  }
  return true;
}

Result<std::shared_ptr<CompiledGrammar>> compile_grammar(Grammar grammar, std::shared_ptr<const TokenVocab> vocab) {
  auto compiled = std::make_shared<CompiledGrammar>(std::move(grammar), std::move(vocab));
  if (compiled->initial() < 0) return Error{"grammar too complex: its start state exceeds the matcher's limits"};
  return compiled;
}

GrammarMatcher::GrammarMatcher(std::shared_ptr<CompiledGrammar> grammar) : grammar_(std::move(grammar)) {
  DI_CHECK(grammar_->initial() >= 0, "a CompiledGrammar not from compile_grammar()");
  history_.push_back(grammar_->initial());
  terminated_history_.push_back(false);
}

bool GrammarMatcher::fill_next_token_bitmask(uint32_t* words) {
  const int32_t num_words = grammar_->vocab().num_mask_words();
  if (terminated_) {
    std::memset(words, 0, static_cast<size_t>(num_words) * sizeof(uint32_t));
    error_ = "the grammar already terminated";
    return false;
  }
  if (!grammar_->fill_mask(history_.back(), words)) {
    error_ = "grammar too complex: the matcher exceeded its state limit";
    return false;
  }
  for (int32_t w = 0; w < num_words; ++w) {
    if (words[w] != 0) return true;
  }
  error_ = "grammar dead end: no token of the vocabulary can continue the output";
  return false;
}

bool GrammarMatcher::accept_token(int32_t token_id) {
  const TokenVocab& vocab = grammar_->vocab();
  if (terminated_ || token_id < 0 || token_id >= vocab.mask_size()) return false;
  if (vocab.is_stop(token_id)) {
    if (!can_end()) return false;
    history_.push_back(history_.back());
    terminated_ = true;
    terminated_history_.push_back(true);
    return true;
  }
  if (token_id >= vocab.num_tokens() || vocab.token_bytes(token_id).empty()) return false;
  const StateId next = grammar_->advance(history_.back(), vocab.token_bytes(token_id));
  if (next < 0) {
    if (next == kOverflowState) error_ = "grammar too complex: the matcher exceeded its state limit";
    return false;
  }
  history_.push_back(next);
  terminated_history_.push_back(false);
  return true;
}

bool GrammarMatcher::accept_bytes(std::string_view bytes) {
  if (terminated_) return false;
  const StateId next = grammar_->advance(history_.back(), bytes);
  if (next < 0) {
    if (next == kOverflowState) error_ = "grammar too complex: the matcher exceeded its state limit";
    return false;
  }
  history_.push_back(next);
  terminated_history_.push_back(false);
  return true;
}

void GrammarMatcher::rollback(int num_tokens) {
  DI_CHECK(num_tokens >= 0 && num_tokens <= num_accepted_tokens(), "rollback of " << num_tokens);
  history_.resize(history_.size() - static_cast<size_t>(num_tokens));
  terminated_history_.resize(history_.size());
  terminated_ = terminated_history_.back();
}

bool GrammarMatcher::can_end() const { return !terminated_ && grammar_->can_end(history_.back()); }

bool GrammarMatcher::must_end() const {
  return terminated_ || (grammar_->can_end(history_.back()) && !grammar_->can_continue(history_.back()));
}

}  // namespace deepinfer::grammar
