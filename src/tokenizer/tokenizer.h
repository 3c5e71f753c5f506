// The tokenizer of a Hugging Face model directory (tokenizer.json + tokenizer_config.json):
// encoding with special-token safety, parallel encoding of prompt segments, one-shot and
// streaming decoding.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/result.h"

namespace deepinfer {

class ThreadPool;

namespace tokenizer {
struct TokenizerImpl;
class DecodeStream;
}  // namespace tokenizer

// A piece of a rendered prompt. Text segments come from users (or tools) and are encoded as
// plain text; a special segment is one control token written by the prompt template.
struct PromptSegment {
  std::string text;
  bool is_special = false;
};

// Immutable once loaded and thread-safe; copies share the loaded data.
//
// Added tokens. encode() matches no added token at all, special or not: every literal in the
// text is encoded as ordinary text, and the model's merges never yield a special token's id.
// This is stricter than Hugging Face (whose split_special_tokens mode still matches
// non-special added tokens) on purpose: DeepSeek-V3 marks <｜User｜>, <｜Assistant｜> and its
// tool-call delimiters as non-special, and Qwen3 its <tool_call> and <think>, so matching them
// would let user text forge turns and tool calls. encode_with_special() matches every added
// token exactly like Hugging Face's encode(text, add_special_tokens=false).
class Tokenizer {
 public:
  // dir_or_file: a model directory holding tokenizer.json (and optionally
  // tokenizer_config.json for bos/eos), or the path of a tokenizer.json.
  static Result<Tokenizer> load(const std::string& dir_or_file);

  // Errors: invalid UTF-8 (naming the byte offset), or a regex giving up on pathological input.
  Result<std::vector<int32_t>> encode(std::string_view text) const;
  Result<std::vector<int32_t>> encode_with_special(std::string_view text) const;

  // Text segments are encoded with encode(), in parallel on pool (inline when pool is null);
  // a special segment must be exactly the content of one added token. Ids are joined in order,
  // and equal encode_with_special(concatenated texts) when the text segments hold no added-token
  // literal and no two text segments are adjacent.
  Result<std::vector<int32_t>> encode_segments(const std::vector<PromptSegment>& segments,
                                               ThreadPool* pool) const;

  // Adds what the tokenizer's post-processor adds around a single sequence (for example BOS
  // for Llama 2); Hugging Face's add_special_tokens=true. encode() never does this itself.
  std::vector<int32_t> add_special_tokens(const std::vector<int32_t>& ids) const;

  // Ids without a token (beyond the vocabulary) are skipped, as Hugging Face does.
  std::string decode(const std::vector<int32_t>& ids, bool skip_special_tokens) const;

  std::optional<int32_t> token_to_id(std::string_view token) const;
  std::optional<std::string> id_to_token(int32_t id) const;
  // One more than the largest id (model vocabulary and added tokens).
  int32_t vocab_size() const;
  bool is_special(int32_t id) const;
  // The id of the added token whose content is exactly text.
  std::optional<int32_t> find_added_token(std::string_view text) const;
  // From tokenizer_config.json (bos_token / eos_token), when present and known.
  std::optional<int32_t> bos_id() const;
  std::optional<int32_t> eos_id() const;

 private:
  friend class StreamingDetokenizer;
  explicit Tokenizer(std::shared_ptr<const tokenizer::TokenizerImpl> impl) : impl_(std::move(impl)) {}
  std::shared_ptr<const tokenizer::TokenizerImpl> impl_;
};

// Decodes generated ids one at a time. push() returns only text that no later id can change
// (never half a UTF-8 character, byte-fallback runs resolved); flush() returns the rest. The
// concatenation of everything returned equals decode(all ids). Not thread-safe; after flush()
// the detokenizer starts a new stream.
class StreamingDetokenizer {
 public:
  StreamingDetokenizer(const Tokenizer& tokenizer, bool skip_special_tokens);
  ~StreamingDetokenizer();
  StreamingDetokenizer(StreamingDetokenizer&&) noexcept;
  StreamingDetokenizer& operator=(StreamingDetokenizer&&) noexcept;

  std::string push(int32_t id);
  std::string flush();

 private:
  std::shared_ptr<const tokenizer::TokenizerImpl> impl_;
  bool skip_special_tokens_;
  std::unique_ptr<tokenizer::DecodeStream> stream_;
};

}  // namespace deepinfer
