// Normalizers of tokenizer.json (NFC/NFD/NFKC/NFKD, Lowercase, Strip, Prepend, Replace, Sequence),
// flattened into one list of steps applied in order.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/result.h"
#include "tokenizer/regex.h"
#include "tokenizer/unicode.h"

namespace deepinfer::tokenizer {

struct NormalizerStep {
  enum class Kind { kUnicode, kLowercase, kStrip, kPrepend, kReplace };
  Kind kind = Kind::kUnicode;
  NormalForm form = NormalForm::kNfc;  // kUnicode
  bool strip_left = false;             // kStrip
  bool strip_right = false;            // kStrip
  std::string text;                    // kPrepend: the prefix; kReplace: the literal pattern
  std::optional<Regex> regex;          // kReplace with a Regex pattern
  std::string content;                 // kReplace: the replacement
};

// Drops leading and/or trailing Unicode White_Space (Rust's trim_start / trim_end).
std::string_view trim_whitespace(std::string_view text, bool left, bool right);

// Immutable; thread-safe.
class Normalizer {
 public:
  Normalizer() = default;
  explicit Normalizer(std::vector<NormalizerStep> steps) : steps_(std::move(steps)) {}

  bool empty() const { return steps_.empty(); }
  // Returns the normalized text: a view of `text` when no step changed it, else of `storage`.
  Result<std::string_view> normalize(std::string_view text, std::string& storage) const;

 private:
  std::vector<NormalizerStep> steps_;
};

}  // namespace deepinfer::tokenizer
