// Pre-tokenizers of tokenizer.json (Split, ByteLevel, Digits, Metaspace, Sequence): they cut
// normalized text into pieces that the model encodes independently.
#pragma once

#include <deque>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/result.h"
#include "tokenizer/regex.h"

namespace deepinfer::tokenizer {

// A piece of text handed to the model. at_origin: it starts at offset 0 of the original input
// (Metaspace's prepend_scheme "first" depends on it).
struct Piece {
  std::string_view text;
  bool at_origin = false;
};

// Owns the text that pre-tokenizers create (pieces view into it); lives for one encode call.
class PieceArena {
 public:
  std::string_view keep(std::string text) { return buffers_.emplace_back(std::move(text)); }

 private:
  std::deque<std::string> buffers_;
};

enum class SplitBehavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

struct PreTokenizerStep {
  enum class Kind { kSplit, kByteLevel, kDigits, kMetaspace };
  Kind kind = Kind::kSplit;
  // kSplit (String patterns are compiled escaped); kByteLevel with use_regex uses the GPT-2 one.
  std::optional<Regex> regex;
  SplitBehavior behavior = SplitBehavior::kIsolated;
  bool invert = false;
  bool add_prefix_space = false;   // kByteLevel
  bool individual_digits = false;  // kDigits
  // kMetaspace
  std::string replacement = "\xE2\x96\x81";  // U+2581
  enum class Prepend { kAlways, kFirst, kNever } prepend = Prepend::kAlways;
  bool split = true;
};

// The GPT-2 pattern ByteLevel uses when use_regex is true.
inline constexpr std::string_view kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

// Immutable; thread-safe. A ByteLevel step leaves bytes as they are: the byte-level model reads
// raw bytes, so the byte-to-character mapping of Hugging Face happens in the vocabulary instead.
class PreTokenizer {
 public:
  PreTokenizer() = default;
  explicit PreTokenizer(std::vector<PreTokenizerStep> steps) : steps_(std::move(steps)) {}

  bool has_byte_level() const;
  // Replaces pieces by their pre-tokenized sub-pieces (empty ones dropped).
  Result<void> run(std::vector<Piece>& pieces, PieceArena& arena) const;

 private:
  std::vector<PreTokenizerStep> steps_;
};

// Backslash-escapes text so that it compiles as a regex matching itself.
std::string escape_regex(std::string_view text);

}  // namespace deepinfer::tokenizer
