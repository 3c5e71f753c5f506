// Normalizer steps, each matching the Hugging Face tokenizers normalizer of the same name.
#include "tokenizer/normalizer.h"

#include "tokenizer/utf8.h"

namespace deepinfer::tokenizer {

namespace {

void replace_literal(std::string_view text, std::string_view pattern, std::string_view content, std::string& out) {
  out.clear();
  size_t last = 0;
  for (size_t pos = text.find(pattern); pos != std::string_view::npos; pos = text.find(pattern, last)) {
    out.append(text.substr(last, pos - last));
    out.append(content);
    last = pos + pattern.size();
  }
  out.append(text.substr(last));
}

}  // namespace

std::string_view trim_whitespace(std::string_view text, bool left, bool right) {
  if (left) {
    size_t pos = 0;
    while (pos < text.size()) {
      size_t next = pos;
      if (!is_unicode_whitespace(next_code_point(text, next))) break;
      pos = next;
    }
    text.remove_prefix(pos);
  }
  if (right) {
    size_t end = text.size();
    while (end > 0) {
      size_t start = end - 1;
      while (start > 0 && (static_cast<uint8_t>(text[start]) & 0xC0) == 0x80) --start;
      size_t pos = start;
      if (!is_unicode_whitespace(next_code_point(text, pos))) break;
      end = start;
    }
    text = text.substr(0, end);
  }
  return text;
}

Result<std::string_view> Normalizer::normalize(std::string_view text, std::string& storage) const {
  std::string_view current = text;
  std::string scratch;
  for (const NormalizerStep& step : steps_) {
    // Each step writes into scratch, which then becomes storage; current may view either text
    // or storage, never scratch.
    switch (step.kind) {
      case NormalizerStep::Kind::kUnicode: {
        Result<bool> changed = normalize_unicode(step.form, current, scratch);
        if (!changed.ok()) return changed.error();
        if (!*changed) continue;
        break;
      }
      case NormalizerStep::Kind::kLowercase: {
        Result<std::string> lowered = to_lower_unicode(current);
        if (!lowered.ok()) return lowered.error();
        scratch = std::move(lowered).value();
        break;
      }
      case NormalizerStep::Kind::kStrip:
        current = trim_whitespace(current, step.strip_left, step.strip_right);
        continue;
      case NormalizerStep::Kind::kPrepend:
        if (current.empty()) continue;
        scratch.assign(step.text);
        scratch.append(current);
        break;
      case NormalizerStep::Kind::kReplace: {
        if (step.regex) {
          Result<std::string> replaced = regex_replace_all(*step.regex, current, step.content);
          if (!replaced.ok()) return replaced.error();
          scratch = std::move(replaced).value();
        } else {
          if (step.text.empty() || current.find(step.text) == std::string_view::npos) continue;
          replace_literal(current, step.text, step.content, scratch);
        }
        break;
      }
    }
    storage.swap(scratch);
    current = storage;
  }
  return current;
}

}  // namespace deepinfer::tokenizer
