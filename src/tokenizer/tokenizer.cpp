// Tokenizer: loading, the two encode modes, prompt segments, post-processing and lookups.
#include "tokenizer/tokenizer.h"

#include <filesystem>

#include "core/thread_pool.h"
#include "tokenizer/tokenizer_impl.h"
#include "tokenizer/utf8.h"

namespace deepinfer {

using tokenizer::TokenizerImpl;

namespace tokenizer {

Result<void> TokenizerImpl::encode_normalized(std::string_view normalized, bool at_origin,
                                              std::vector<int32_t>& out) const {
  std::vector<Piece> pieces{Piece{normalized, at_origin}};
  PieceArena arena;
  DI_TRY(pre_tokenizer.run(pieces, arena));
  // The scratch's word cache views the pieces, which live until this function returns.
  BpeScratch scratch;
  for (const Piece& piece : pieces) model.encode_piece(piece.text, out, scratch);
  return {};
}

Result<void> TokenizerImpl::encode_plain(std::string_view text, bool at_origin, std::vector<int32_t>& out) const {
  std::string storage;
  Result<std::string_view> normalized = normalizer.normalize(text, storage);
  if (!normalized.ok()) return normalized.error();
  return encode_normalized(*normalized, at_origin, out);
}

// Hugging Face's order: added tokens with normalized=false are found in the raw text; the rest
// is normalized piece by piece, and normalized=true tokens are found in those pieces.
Result<void> TokenizerImpl::encode_matching_added(std::string_view text, std::vector<int32_t>& out) const {
  std::vector<TextSpan> spans;
  if (raw_matcher.empty()) {
    if (!text.empty()) spans.push_back({0, text.size(), -1});
  } else {
    raw_matcher.split(text, spans);
  }
  std::vector<TextSpan> inner;
  std::string storage;
  for (const TextSpan& span : spans) {
    if (span.token_index >= 0) {
      out.push_back(added_tokens[span.token_index].id);
      continue;
    }
    Result<std::string_view> normalized = normalizer.normalize(text.substr(span.start, span.end - span.start), storage);
    if (!normalized.ok()) return normalized.error();
    inner.clear();
    if (normalized_matcher.empty()) {
      if (!normalized->empty()) inner.push_back({0, normalized->size(), -1});
    } else {
      normalized_matcher.split(*normalized, inner);
    }
    for (const TextSpan& part : inner) {
      if (part.token_index >= 0) {
        out.push_back(added_tokens[part.token_index].id);
        continue;
      }
      bool at_origin = span.start == 0 && part.start == 0;
      DI_TRY(encode_normalized(normalized->substr(part.start, part.end - part.start), at_origin, out));
    }
  }
  return {};
}

}  // namespace tokenizer

namespace {

Result<void> check_utf8_input(std::string_view text) {
  size_t bad = tokenizer::find_invalid_utf8(text);
  if (bad == SIZE_MAX) return {};
  return Error{"invalid UTF-8 in the text to encode at byte offset " + std::to_string(bad) +
               " (byte 0x" + "0123456789ABCDEF"[static_cast<uint8_t>(text[bad]) >> 4] +
               "0123456789ABCDEF"[static_cast<uint8_t>(text[bad]) & 15] + "); the text must be UTF-8"};
}

}  // namespace

Result<Tokenizer> Tokenizer::load(const std::string& dir_or_file) {
  namespace fs = std::filesystem;
  std::error_code ec;
  fs::path path(dir_or_file);
  fs::path json_path = fs::is_directory(path, ec) ? path / "tokenizer.json" : path;
  if (!fs::exists(json_path, ec)) {
    return Error{json_path.string() + ": not found (expected a model directory with tokenizer.json, or the file)"};
  }
  fs::path config_path = json_path.parent_path() / "tokenizer_config.json";
  Result<std::shared_ptr<TokenizerImpl>> impl = tokenizer::load_tokenizer_files(json_path.string(), config_path.string());
  if (!impl.ok()) return impl.error();
  return Tokenizer(std::move(impl).value());
}

namespace {

Result<std::vector<int32_t>> encode_text(const TokenizerImpl& impl, std::string_view text, bool at_origin) {
  DI_TRY(check_utf8_input(text));
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3 + 4);
  DI_TRY(impl.encode_plain(text, at_origin, ids));
  return ids;
}

}  // namespace

Result<std::vector<int32_t>> Tokenizer::encode(std::string_view text) const { return encode_text(*impl_, text, true); }

Result<std::vector<int32_t>> Tokenizer::encode_with_special(std::string_view text) const {
  DI_TRY(check_utf8_input(text));
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3 + 4);
  DI_TRY(impl_->encode_matching_added(text, ids));
  return ids;
}

Result<std::vector<int32_t>> Tokenizer::encode_segments(const std::vector<PromptSegment>& segments,
                                                        ThreadPool* pool) const {
  // Special segments first: their tokens' lstrip/rstrip flags trim the neighbouring text, as
  // matching them in the rendered prompt would.
  std::vector<const tokenizer::AddedToken*> specials(segments.size(), nullptr);
  for (size_t i = 0; i < segments.size(); ++i) {
    if (!segments[i].is_special) continue;
    int32_t index = impl_->added_index(segments[i].text);
    if (index < 0) {
      return Error{"prompt segment " + std::to_string(i) + ": '" + segments[i].text +
                   "' is marked special but is not exactly one added token of " + impl_->path};
    }
    specials[i] = &impl_->added_tokens[index];
  }
  std::vector<Result<std::vector<int32_t>>> parts(segments.size(), Result<std::vector<int32_t>>(std::vector<int32_t>{}));
  auto encode_one = [&](size_t i) {
    if (specials[i] != nullptr) {
      parts[i] = std::vector<int32_t>{specials[i]->id};
      return;
    }
    std::string_view text = segments[i].text;
    if (i > 0 && specials[i - 1] != nullptr && specials[i - 1]->rstrip) text = tokenizer::trim_whitespace(text, true, false);
    if (i + 1 < segments.size() && specials[i + 1] != nullptr && specials[i + 1]->lstrip) {
      text = tokenizer::trim_whitespace(text, false, true);
    }
    // Only the first segment starts the prompt: the ids then equal encode_with_special of the
    // whole rendered prompt whenever the text segments hold no added-token literal.
    parts[i] = encode_text(*impl_, text, i == 0);
  };
  if (pool != nullptr && segments.size() > 1) {
    pool->parallel_for(0, segments.size(), encode_one);
  } else {
    for (size_t i = 0; i < segments.size(); ++i) encode_one(i);
  }
  size_t total = 0;
  for (size_t i = 0; i < parts.size(); ++i) {
    if (!parts[i].ok()) return Error{"prompt segment " + std::to_string(i) + ": " + parts[i].error().message};
    total += parts[i]->size();
  }
  std::vector<int32_t> ids;
  ids.reserve(total);
  for (const auto& part : parts) ids.insert(ids.end(), part->begin(), part->end());
  return ids;
}

std::vector<int32_t> Tokenizer::add_special_tokens(const std::vector<int32_t>& ids) const {
  std::vector<int32_t> current = ids;
  for (const std::vector<int32_t>& templ : impl_->post_templates) {
    std::vector<int32_t> next;
    next.reserve(current.size() + templ.size());
    for (int32_t item : templ) {
      if (item == tokenizer::kSequenceSlot) {
        next.insert(next.end(), current.begin(), current.end());
      } else {
        next.push_back(item);
      }
    }
    current = std::move(next);
  }
  return current;
}

std::string Tokenizer::decode(const std::vector<int32_t>& ids, bool skip_special_tokens) const {
  StreamingDetokenizer detokenizer(*this, skip_special_tokens);
  std::string text;
  for (int32_t id : ids) text += detokenizer.push(id);
  text += detokenizer.flush();
  return text;
}

std::optional<int32_t> Tokenizer::token_to_id(std::string_view token) const {
  int32_t id = impl_->token_id(token);
  return id >= 0 ? std::optional<int32_t>(id) : std::nullopt;
}

std::optional<std::string> Tokenizer::id_to_token(int32_t id) const {
  if (!impl_->has_id(id)) return std::nullopt;
  return impl_->id_to_text[id];
}

int32_t Tokenizer::vocab_size() const { return static_cast<int32_t>(impl_->id_flags.size()); }

bool Tokenizer::is_special(int32_t id) const { return impl_->special(id); }

std::optional<int32_t> Tokenizer::find_added_token(std::string_view text) const {
  int32_t index = impl_->added_index(text);
  return index >= 0 ? std::optional<int32_t>(impl_->added_tokens[index].id) : std::nullopt;
}

std::optional<int32_t> Tokenizer::bos_id() const { return impl_->bos_id; }
std::optional<int32_t> Tokenizer::eos_id() const { return impl_->eos_id; }

StreamingDetokenizer::StreamingDetokenizer(const Tokenizer& tokenizer, bool skip_special_tokens)
    : impl_(tokenizer.impl_),
      skip_special_tokens_(skip_special_tokens),
      stream_(std::make_unique<tokenizer::DecodeStream>(impl_->decoder)) {}

StreamingDetokenizer::~StreamingDetokenizer() = default;
StreamingDetokenizer::StreamingDetokenizer(StreamingDetokenizer&&) noexcept = default;
StreamingDetokenizer& StreamingDetokenizer::operator=(StreamingDetokenizer&&) noexcept = default;

std::string StreamingDetokenizer::push(int32_t id) {
  std::string text;
  if (!impl_->has_id(id) || (skip_special_tokens_ && impl_->special(id))) return text;
  stream_->push(impl_->id_to_text[id], text);
  return text;
}

std::string StreamingDetokenizer::flush() {
  std::string text;
  stream_->finish(text);
  stream_ = std::make_unique<tokenizer::DecodeStream>(impl_->decoder);
  return text;
}

}  // namespace deepinfer
