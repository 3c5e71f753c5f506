// PromptBuilder: splits template text at control tokens and merges adjacent text.
#include "recipe/prompt.h"

namespace deepinfer {

void PromptBuilder::text(std::string_view text) {
  if (text.empty()) return;
  if (!segments_.empty() && !segments_.back().is_special) {
    segments_.back().text += text;
  } else {
    segments_.push_back(PromptSegment{std::string(text), false});
  }
}

void PromptBuilder::fixed(std::string_view text) {
  size_t plain_begin = 0;
  for (size_t i = 0; i < text.size();) {
    std::string_view match;
    for (const std::string_view token : control_tokens_) {
      if (token.size() > match.size() && text.compare(i, token.size(), token) == 0) match = token;
    }
    if (match.empty()) {
      ++i;
      continue;
    }
    this->text(text.substr(plain_begin, i - plain_begin));
    segments_.push_back(PromptSegment{std::string(match), true});
    i += match.size();
    plain_begin = i;
  }
  this->text(text.substr(plain_begin));
}

std::vector<PromptSegment> PromptBuilder::finish() && { return std::move(segments_); }

std::string prompt_text(const std::vector<PromptSegment>& segments) {
  std::string out;
  for (const PromptSegment& segment : segments) out += segment.text;
  return out;
}

Result<std::vector<int32_t>> encode_prompt(const Tokenizer& tokenizer, const std::vector<PromptSegment>& segments,
                                           ThreadPool* pool) {
  std::vector<PromptSegment> known;
  known.reserve(segments.size());
  for (const PromptSegment& segment : segments) {
    const bool special = segment.is_special && tokenizer.find_added_token(segment.text).has_value();
    if (!special && !known.empty() && !known.back().is_special) {
      known.back().text += segment.text;
    } else {
      known.push_back(PromptSegment{segment.text, special});
    }
  }
  return tokenizer.encode_segments(known, pool);
}

}  // namespace deepinfer
