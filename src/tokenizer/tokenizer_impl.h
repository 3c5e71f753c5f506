// The loaded tokenizer shared by Tokenizer and StreamingDetokenizer (internal to the layer).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/result.h"
#include "tokenizer/added_tokens.h"
#include "tokenizer/bpe_model.h"
#include "tokenizer/decoder.h"
#include "tokenizer/flat_map.h"
#include "tokenizer/normalizer.h"
#include "tokenizer/pre_tokenizer.h"

namespace deepinfer::tokenizer {

// Marks where the encoded sequence goes in a post-processor template.
inline constexpr int32_t kSequenceSlot = -1;

struct TokenizerImpl {
  std::string path;  // of tokenizer.json, for messages
  Normalizer normalizer;
  PreTokenizer pre_tokenizer;
  BpeModel model;
  std::vector<AddedToken> added_tokens;
  AddedTokenMatcher raw_matcher;         // added tokens with normalized=false, on raw text
  AddedTokenMatcher normalized_matcher;  // normalized=true, on normalized text
  StringIdMap added_indices;             // added token content -> index in added_tokens
  std::vector<std::string> id_to_text;   // id -> token text
  std::vector<uint8_t> id_flags;         // id -> kPresent | kSpecial
  std::optional<std::vector<DecoderStep>> decoder;  // nullopt: none in the file
  // Post-processor templates applied in order; kSequenceSlot stands for the encoded ids.
  std::vector<std::vector<int32_t>> post_templates;
  std::optional<int32_t> bos_id;
  std::optional<int32_t> eos_id;

  static constexpr uint8_t kPresent = 1;
  static constexpr uint8_t kSpecial = 2;

  bool has_id(int32_t id) const {
    return id >= 0 && static_cast<size_t>(id) < id_flags.size() && (id_flags[id] & kPresent);
  }
  bool special(int32_t id) const { return has_id(id) && (id_flags[id] & kSpecial); }
  // Added tokens first, then the model's vocabulary (Hugging Face's order); -1 when absent.
  int32_t token_id(std::string_view text) const {
    int32_t index = added_indices.find(text);
    return index >= 0 ? added_tokens[index].id : model.find_token(text);
  }
  int32_t added_index(std::string_view text) const { return added_indices.find(text); }

  // Pre-tokenizes and encodes already-normalized text; at_origin: it starts the input.
  Result<void> encode_normalized(std::string_view normalized, bool at_origin, std::vector<int32_t>& out) const;
  // at_origin: the text starts the prompt (Metaspace prepends its space only there).
  Result<void> encode_plain(std::string_view text, bool at_origin, std::vector<int32_t>& out) const;
  Result<void> encode_matching_added(std::string_view text, std::vector<int32_t>& out) const;
};

// Reads tokenizer.json (and tokenizer_config.json beside it, when present).
Result<std::shared_ptr<TokenizerImpl>> load_tokenizer_files(const std::string& tokenizer_json_path,
                                                            const std::string& config_path);

}  // namespace deepinfer::tokenizer
