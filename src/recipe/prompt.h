// A rendered chat prompt as ordered segments: control tokens the template writes are special
// segments, everything else (all caller text included) is plain text, so no text a client sends
// can ever become a special token.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/result.h"
#include "tokenizer/tokenizer.h"

namespace deepinfer {

// Builds segments for one family. Not thread-safe; one builder per render.
class PromptBuilder {
 public:
  // control_tokens: the special-token strings of the family's template (e.g. "<|im_start|>").
  explicit PromptBuilder(std::vector<std::string_view> control_tokens) : control_tokens_(std::move(control_tokens)) {}

  // Text the template itself writes: each control token in it becomes a special segment.
  void fixed(std::string_view text);
  // Text that comes from the caller (messages, tool definitions, arguments): never special.
  void text(std::string_view text);

  std::vector<PromptSegment> finish() &&;

 private:
  std::vector<std::string_view> control_tokens_;
  std::vector<PromptSegment> segments_;
};

// The prompt as one string (the segments concatenated).
std::string prompt_text(const std::vector<PromptSegment>& segments);

// Token ids of a rendered prompt. A special segment the tokenizer has as an added token maps to
// its id; one it lacks (the R1 and V3.1 templates' <think> with the original DeepSeek-V3
// vocabulary, say) is merged into the text around it, which is what Hugging Face does with the
// whole string. Text is encoded with no added-token matching, in parallel on pool (inline when
// null). For text free of token literals the ids equal encode_with_special(prompt_text(...)).
Result<std::vector<int32_t>> encode_prompt(const Tokenizer& tokenizer, const std::vector<PromptSegment>& segments,
                                           ThreadPool* pool);

}  // namespace deepinfer
