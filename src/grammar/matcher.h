// A grammar compiled against a vocabulary (shared by every request using it) and the
// per-request matcher: token masks, token acceptance, rollback, end detection.
#pragma once

#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "grammar/automaton.h"
#include "grammar/grammar.h"
#include "grammar/token_vocab.h"

namespace deepinfer::grammar {

// Thread-safe: matchers on several threads share it; its automaton and mask cache are
// guarded by one mutex.
class CompiledGrammar {
 public:
  CompiledGrammar(Grammar grammar, std::shared_ptr<const TokenVocab> vocab, size_t mask_cache_bytes = 16 << 20);

  const Grammar& grammar() const { return grammar_; }
  const TokenVocab& vocab() const { return *vocab_; }
  std::shared_ptr<const TokenVocab> vocab_ptr() const { return vocab_; }
  // Warnings from the front end (keywords dropped in lenient mode), for the response.
  std::vector<std::string> warnings;

 private:
  friend class GrammarMatcher;
  friend Result<std::shared_ptr<CompiledGrammar>> compile_grammar(Grammar, std::shared_ptr<const TokenVocab>);
  // The mask of state into words (num_mask_words); false on automaton overflow.
  bool fill_mask(StateId state, uint32_t* words);
  // One walk of the vocabulary trie from state; false on automaton overflow.
  bool walk_trie(StateId state, uint32_t* words);
  // class_mask.cpp: the mask through the vocabulary's character-class split, when state has a
  // large class; kNotApplicable leaves words unspecified for the trie walk to fill.
  enum class ClassMask : uint8_t { kDone, kNotApplicable, kOverflow };
  ClassMask fill_mask_by_class(StateId state, uint32_t* words);
  // The common successor of state over the class (ASCII bytes, and every well-formed multi-byte
  // character when multibyte), kDeadState when all are rejected, a negative kMixed otherwise.
  StateId class_target(StateId state, const ByteSet& ascii, bool multibyte);
  StateId multibyte_target(StateId state);
  // Whether bytes[pos..] can follow from; overflow tells an overflow from a rejection.
  bool walk_token(StateId from, const std::string& bytes, size_t pos, bool& overflow);
  // kDeadState when bytes cannot follow state.
  StateId advance(StateId state, std::string_view bytes);
  StateId initial();
  bool can_end(StateId state);
  bool can_continue(StateId state);

  Grammar grammar_;
  std::shared_ptr<const TokenVocab> vocab_;
  std::mutex mutex_;
  Automaton automaton_;
  size_t mask_cache_bytes_;
  std::list<StateId> lru_;
  std::unordered_map<StateId, std::pair<std::vector<uint32_t>, std::list<StateId>::iterator>> masks_;
  std::vector<StateId> walk_states_;
};

// The checked way to build a CompiledGrammar: fails when even the start state exceeds the
// automaton's limits.
Result<std::shared_ptr<CompiledGrammar>> compile_grammar(Grammar grammar, std::shared_ptr<const TokenVocab> vocab);

// One request's position in a grammar. Not thread-safe (one request, one thread at a time).
class GrammarMatcher {
 public:
  // grammar comes from compile_grammar().
  explicit GrammarMatcher(std::shared_ptr<CompiledGrammar> grammar);

  // Fills words[0 .. num_mask_words) with bit (id % 32) of word (id / 32) set for each allowed
  // id. Returns false when no token is allowed (a dead end) or the grammar got too complex;
  // error() then says which.
  bool fill_next_token_bitmask(uint32_t* words);
  // Advances by one sampled token; false (and no change) when the grammar forbids it. A stop
  // token is accepted when the grammar can end, and terminates the matcher.
  bool accept_token(int32_t token_id);
  // Advances by raw bytes (tests, jump-forward); false and no change when rejected.
  bool accept_bytes(std::string_view bytes);
  // Undoes the last num_tokens accepted tokens (speculative decoding).
  void rollback(int num_tokens);
  int num_accepted_tokens() const { return static_cast<int>(history_.size()) - 1; }

  bool can_end() const;
  // The grammar is complete and nothing may follow: generation must stop.
  bool must_end() const;
  bool is_terminated() const { return terminated_; }
  const std::string& error() const { return error_; }
  const CompiledGrammar& compiled() const { return *grammar_; }

 private:
  std::shared_ptr<CompiledGrammar> grammar_;
  std::vector<StateId> history_;  // the state after each accepted token; [0] is the start
  std::vector<bool> terminated_history_;
  bool terminated_ = false;
  std::string error_;
};

}  // namespace deepinfer::grammar
