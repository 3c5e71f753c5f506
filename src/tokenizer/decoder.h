// Decoders of tokenizer.json (ByteLevel, Metaspace, ByteFallback, Fuse, Strip, Replace, Sequence)
// run as a streaming pipeline: tokens go in one at a time, text comes out as soon as it is final.
// The one-shot decode is the same pipeline fed every token, so both give identical text.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tokenizer/regex.h"

namespace deepinfer::tokenizer {

struct DecoderStep {
  enum class Kind { kByteLevel, kMetaspace, kByteFallback, kFuse, kStrip, kReplace };
  Kind kind = Kind::kByteLevel;
  std::string text;             // kMetaspace: the replacement; kStrip: the character; kReplace: literal
  bool strip_first = true;      // kMetaspace: prepend_scheme is not "never"
  size_t start = 0;             // kStrip: characters cut at the start
  size_t stop = 0;              // kStrip: characters cut at the end
  std::optional<Regex> regex;   // kReplace with a Regex pattern
  std::string content;          // kReplace: the replacement
};

class DecodeStage;

// One decoding in progress. Not thread-safe; cheap to create. Without a decoder (nullopt)
// Hugging Face joins tokens with a space, and so does this.
class DecodeStream {
 public:
  explicit DecodeStream(const std::optional<std::vector<DecoderStep>>& steps);
  ~DecodeStream();
  DecodeStream(DecodeStream&&) noexcept;
  DecodeStream& operator=(DecodeStream&&) noexcept;

  // Appends to out the text that this token makes final (whole UTF-8 characters only).
  void push(std::string_view token, std::string& out);
  // Ends the decoding: appends what was held back. The stream is then spent.
  void finish(std::string& out);

 private:
  std::vector<std::unique_ptr<DecodeStage>> stages_;
  std::unique_ptr<std::string*> sink_;  // heap-held so stages keep a valid pointer across moves
};

}  // namespace deepinfer::tokenizer
