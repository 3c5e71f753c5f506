// Pre-tokenizer steps, matching the split semantics of Hugging Face tokenizers: a pattern marks
// matches and gaps, the behaviour decides how they become pieces, empty pieces disappear.
#include "tokenizer/pre_tokenizer.h"

#include <algorithm>

#include "tokenizer/unicode.h"
#include "tokenizer/utf8.h"

namespace deepinfer::tokenizer {

namespace {

struct Span {
  size_t start;
  size_t end;
  bool is_match;
};

void add_match(std::vector<Span>& spans, size_t& last, size_t start, size_t end) {
  if (last < start) spans.push_back({last, start, false});
  spans.push_back({start, end, true});
  last = end;
}

Result<void> regex_spans(const Regex& regex, std::string_view text, std::vector<Span>& spans) {
  size_t last = 0;
  Result<void> status = regex.for_each_match(text, [&](size_t start, size_t end) { add_match(spans, last, start, end); });
  if (!status.ok()) return status;
  if (last < text.size()) spans.push_back({last, text.size(), false});
  return {};
}

template <typename Pred>
void char_spans(std::string_view text, Pred&& pred, std::vector<Span>& spans) {
  size_t last = 0;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t start = pos;
    char32_t cp = next_code_point(text, pos);
    if (pred(cp)) add_match(spans, last, start, pos);
  }
  if (last < text.size()) spans.push_back({last, text.size(), false});
}

// Turns matched/gap spans into pieces of `piece` following the behaviour.
void emit_split(const Piece& piece, std::vector<Span>& spans, SplitBehavior behavior, bool invert,
                std::vector<Piece>& out) {
  if (invert)
    for (Span& span : spans) span.is_match = !span.is_match;
  std::vector<Span> kept;  // is_match here means "remove"
  kept.reserve(spans.size());
  bool previous_match = false;
  switch (behavior) {
    case SplitBehavior::kIsolated:
      for (const Span& span : spans) kept.push_back({span.start, span.end, false});
      break;
    case SplitBehavior::kRemoved:
      kept = spans;
      break;
    case SplitBehavior::kContiguous:
      for (const Span& span : spans) {
        if (span.is_match == previous_match && !kept.empty()) {
          kept.back().end = span.end;
        } else {
          kept.push_back({span.start, span.end, false});
        }
        previous_match = span.is_match;
      }
      break;
    case SplitBehavior::kMergedWithPrevious:
      for (const Span& span : spans) {
        if (span.is_match && !previous_match && !kept.empty()) {
          kept.back().end = span.end;
        } else {
          kept.push_back({span.start, span.end, false});
        }
        previous_match = span.is_match;
      }
      break;
    case SplitBehavior::kMergedWithNext:
      for (size_t i = spans.size(); i-- > 0;) {
        const Span& span = spans[i];
        if (span.is_match && !previous_match && !kept.empty()) {
          kept.back().start = span.start;
        } else {
          kept.push_back({span.start, span.end, false});
        }
        previous_match = span.is_match;
      }
      std::reverse(kept.begin(), kept.end());
      break;
  }
  for (const Span& span : kept) {
    if (span.is_match || span.start == span.end) continue;
    out.push_back({piece.text.substr(span.start, span.end - span.start), piece.at_origin && span.start == 0});
  }
}

void replace_spaces(std::string_view text, std::string_view replacement, std::string& out) {
  out.clear();
  out.reserve(text.size() + 8);
  for (char c : text) {
    if (c == ' ') {
      out.append(replacement);
    } else {
      out.push_back(c);
    }
  }
}

}  // namespace

std::string escape_regex(std::string_view text) {
  std::string out;
  for (char c : text) {
    auto u = static_cast<unsigned char>(c);
    bool plain = u >= 0x80 || (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
    if (!plain) out.push_back('\\');
    out.push_back(c);
  }
  return out;
}

bool PreTokenizer::has_byte_level() const {
  for (const PreTokenizerStep& step : steps_)
    if (step.kind == PreTokenizerStep::Kind::kByteLevel) return true;
  return false;
}

Result<void> PreTokenizer::run(std::vector<Piece>& pieces, PieceArena& arena) const {
  std::vector<Piece> next;
  std::vector<Span> spans;
  for (const PreTokenizerStep& step : steps_) {
    next.clear();
    next.reserve(pieces.size() * 2);
    for (const Piece& piece : pieces) {
      if (piece.text.empty()) continue;
      spans.clear();
      switch (step.kind) {
        case PreTokenizerStep::Kind::kSplit: {
          Result<void> status = regex_spans(*step.regex, piece.text, spans);
          if (!status.ok()) return status;
          emit_split(piece, spans, step.behavior, step.invert, next);
          break;
        }
        case PreTokenizerStep::Kind::kByteLevel: {
          Piece current = piece;
          if (step.add_prefix_space && current.text.front() != ' ') {
            std::string text(1, ' ');
            text.append(current.text);
            current.text = arena.keep(std::move(text));
          }
          if (!step.regex) {
            next.push_back(current);
            break;
          }
          Result<void> status = regex_spans(*step.regex, current.text, spans);
          if (!status.ok()) return status;
          emit_split(current, spans, SplitBehavior::kIsolated, false, next);
          break;
        }
        case PreTokenizerStep::Kind::kDigits:
          char_spans(piece.text, is_unicode_numeric, spans);
          emit_split(piece, spans, step.individual_digits ? SplitBehavior::kIsolated : SplitBehavior::kContiguous,
                     false, next);
          break;
        case PreTokenizerStep::Kind::kMetaspace: {
          std::string text;
          replace_spaces(piece.text, step.replacement, text);
          bool starts_with_replacement = std::string_view(text).substr(0, step.replacement.size()) == step.replacement;
          bool prepend = !starts_with_replacement &&
                         (step.prepend == PreTokenizerStep::Prepend::kAlways ||
                          (step.prepend == PreTokenizerStep::Prepend::kFirst && piece.at_origin));
          if (prepend) text.insert(0, step.replacement);
          Piece current{arena.keep(std::move(text)), piece.at_origin};
          if (!step.split) {
            next.push_back(current);
            break;
          }
          size_t pos = 0;
          char32_t replacement_cp = next_code_point(step.replacement, pos);
          char_spans(current.text, [&](char32_t cp) { return cp == replacement_cp; }, spans);
          emit_split(current, spans, SplitBehavior::kMergedWithNext, false, next);
          break;
        }
      }
    }
    pieces.swap(next);
  }
  return {};
}

}  // namespace deepinfer::tokenizer
