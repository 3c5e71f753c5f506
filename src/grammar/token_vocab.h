// The vocabulary as the grammar sees it: each token id's decoded bytes, in a pre-order trie so a
// token mask is one walk that skips every subtree whose prefix the grammar rejects.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/result.h"

namespace deepinfer {
class Tokenizer;
}

namespace deepinfer::grammar {

class TokenClassCache;

// Immutable and thread-safe after construction.
class TokenVocab {
 public:
  // token_bytes[id]: the bytes the token decodes to; an empty string marks a token the grammar
  // never allows (special and added tokens, undecodable entries). stop_ids are allowed exactly
  // when the grammar can end. mask_size (the logits dimension) may exceed token_bytes.size():
  // the padded ids are never allowed.
  TokenVocab(std::vector<std::string> token_bytes, std::vector<int32_t> stop_ids, int32_t mask_size);

  // Bytes of every token of a Hugging Face tokenizer: ByteLevel vocabularies (GPT-2 byte
  // alphabet) and SentencePiece-style ones (U+2581 for space, <0xNN> byte fallback). Added
  // tokens get special_token_bytes(id), so only a grammar that names them allows them;
  // ordinary tokens containing the byte 0xFF are excluded; stop_ids default to the
  // tokenizer's eos.
  static Result<TokenVocab> from_tokenizer(const Tokenizer& tokenizer, int32_t mask_size = 0,
                                           std::vector<int32_t> stop_ids = {});

  // Longer tokens are left out of the trie, so never allowed.
  static constexpr size_t kMaxTokenBytes = 65000;

  int32_t mask_size() const { return mask_size_; }
  int32_t num_mask_words() const { return (mask_size_ + 31) / 32; }
  const std::string& token_bytes(int32_t id) const { return token_bytes_[id]; }
  int32_t num_tokens() const { return static_cast<int32_t>(token_bytes_.size()); }
  const std::vector<int32_t>& stop_ids() const { return stop_ids_; }
  bool is_stop(int32_t id) const;

  // The trie in pre-order; node 0 is the root (no byte).
  struct Trie {
    std::vector<uint8_t> byte;
    std::vector<uint16_t> depth;
    std::vector<int32_t> subtree_end;   // first node after this node's subtree
    std::vector<int32_t> tokens_begin;  // into token_ids, tokens ending at this node
    std::vector<int32_t> token_ids;
    int32_t max_depth = 0;
  };
  const Trie& trie() const { return trie_; }
  // The vocabulary split by character classes, shared by every grammar on this vocabulary
  // (a thread-safe cache, hence usable through a const vocabulary).
  TokenClassCache& token_classes() const { return *token_classes_; }

 private:
  std::vector<std::string> token_bytes_;
  std::vector<int32_t> stop_ids_;
  int32_t mask_size_;
  Trie trie_;
  std::shared_ptr<TokenClassCache> token_classes_;
};

// What an added (special) token is to a grammar: 0xFF and its id in three bytes. No valid
// UTF-8 and no other token contains 0xFF, so a grammar literal of these bytes is that one token
// (a tool-call marker such as <｜tool▁sep｜>), never its text spelled with ordinary tokens.
std::string special_token_bytes(int32_t id);

// Decodes a ByteLevel token string (GPT-2's printable alphabet for bytes); nullopt-like empty
// result with ok=false when a character is outside the alphabet.
bool decode_byte_level(const std::string& token, std::string& out);

}  // namespace deepinfer::grammar
