// The BPE model of tokenizer.json: byte-level (GPT-2 style: the vocabulary is keyed by raw bytes
// here) or character-level with byte fallback and unknown-token handling (SentencePiece style).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/result.h"
#include "tokenizer/flat_map.h"

namespace deepinfer::tokenizer {

struct BpeSpec {
  std::vector<std::pair<std::string_view, int32_t>> vocab;         // token text as in the file
  std::vector<std::pair<std::string_view, std::string_view>> merges;  // in rank order
  bool byte_level = false;  // pieces are raw bytes; vocab text uses the GPT-2 byte alphabet
  bool byte_fallback = false;
  bool fuse_unk = false;
  bool ignore_merges = false;
  std::string unk_token;  // empty: none
  std::string continuing_subword_prefix;
  std::string end_of_word_suffix;
  // Ids that the model must never produce (special added tokens that are also in the vocab).
  std::vector<int32_t> forbidden_ids;
};

class BpeCache;

// Per-thread scratch for encode_piece: a word cache and work arrays. Pieces passed with the same
// scratch must stay alive (and unchanged) while it is in use: the cache keys view them.
class BpeScratch {
 public:
  BpeScratch();
  ~BpeScratch();
  BpeScratch(const BpeScratch&) = delete;
  BpeScratch& operator=(const BpeScratch&) = delete;

 private:
  friend class BpeModel;
  std::unique_ptr<BpeCache> cache_;
  std::vector<int32_t> symbols_;
  std::vector<uint64_t> pair_values_;
};

// Immutable after build(); thread-safe.
class BpeModel {
 public:
  static Result<BpeModel> build(const BpeSpec& spec);

  // Appends the ids of one pre-tokenized piece.
  void encode_piece(std::string_view piece, std::vector<int32_t>& out, BpeScratch& scratch) const;

  size_t num_merges() const { return merges_.size(); }
  // The id of a vocabulary entry by its text in the file; -1 when absent.
  int32_t find_token(std::string_view text) const;

 private:
  int32_t lookup(std::string_view key) const;
  void encode_word(std::string_view word, std::vector<int32_t>& out, BpeScratch& scratch) const;
  void initial_symbols(std::string_view piece, std::vector<int32_t>& symbols) const;
  void merge_small(std::vector<int32_t>& symbols, std::vector<uint64_t>& pair_values) const;
  void merge_large(std::vector<int32_t>& symbols) const;
  const uint64_t* find_merge(int32_t left, int32_t right) const {
    return merges_.find((static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right));
  }

  StringIdMap vocab_;     // lookup keys: raw bytes in byte-level mode, else the token text
  StringIdMap unmapped_;  // byte-level mode: tokens whose text is outside the byte alphabet
  FlatU64Map merges_;  // (left << 32 | right) -> (rank << 32 | merged id)
  std::vector<bool> forbidden_;
  int32_t byte_ids_[256];           // byte-level: id of each single byte, -1 if none
  int32_t byte_fallback_ids_[256];  // id of "<0xHH>", -1 if none
  bool byte_level_ = false;
  bool byte_fallback_ = false;
  bool fuse_unk_ = false;
  bool ignore_merges_ = false;
  // SentencePiece vocabularies never put U+2581 after another character inside a token, so a
  // piece can be cut before each word's U+2581 without changing the result; the words then
  // repeat and hit the cache (those tokenizers have no pre-tokenizer to cut the text).
  bool split_words_ = false;
  int32_t unk_id_ = -1;
  std::string prefix_;
  std::string suffix_;
};

// GPT-2's reversible byte <-> character alphabet. Returns -1 for characters outside it.
int byte_level_char_to_byte(char32_t cp);
char32_t byte_level_byte_to_char(uint8_t byte);
// Converts a byte-level token text back to bytes; false when a character is outside the alphabet.
bool byte_level_decode(std::string_view token, std::string& bytes);

}  // namespace deepinfer::tokenizer
