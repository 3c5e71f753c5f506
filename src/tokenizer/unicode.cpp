// ICU-backed Unicode services for the tokenizer.
#include "tokenizer/unicode.h"

#include <unicode/bytestream.h>
#include <unicode/normalizer2.h>
#include <unicode/stringpiece.h>
#include <unicode/uchar.h>
#include <unicode/ucasemap.h>

#include <memory>

namespace deepinfer::tokenizer {

namespace {

const icu::Normalizer2* normalizer_for(NormalForm form, UErrorCode& status) {
  switch (form) {
    case NormalForm::kNfc: return icu::Normalizer2::getNFCInstance(status);
    case NormalForm::kNfd: return icu::Normalizer2::getNFDInstance(status);
    case NormalForm::kNfkc: return icu::Normalizer2::getNFKCInstance(status);
    case NormalForm::kNfkd: return icu::Normalizer2::getNFKDInstance(status);
  }
  return nullptr;
}

}  // namespace

Result<bool> normalize_unicode(NormalForm form, std::string_view text, std::string& out) {
  UErrorCode status = U_ZERO_ERROR;
  const icu::Normalizer2* normalizer = normalizer_for(form, status);
  if (U_FAILURE(status) || normalizer == nullptr) {
    return Error{std::string("ICU normalizer unavailable: ") + u_errorName(status)};
  }
  icu::StringPiece piece(text.data(), static_cast<int32_t>(text.size()));
  if (normalizer->isNormalizedUTF8(piece, status) && U_SUCCESS(status)) return false;
  status = U_ZERO_ERROR;
  out.clear();
  out.reserve(text.size() + text.size() / 8);
  icu::StringByteSink<std::string> sink(&out);
  normalizer->normalizeUTF8(0, piece, sink, nullptr, status);
  if (U_FAILURE(status)) return Error{std::string("Unicode normalization failed: ") + u_errorName(status)};
  return true;
}

Result<std::string> to_lower_unicode(std::string_view text) {
  UErrorCode status = U_ZERO_ERROR;
  std::unique_ptr<UCaseMap, void (*)(UCaseMap*)> map(ucasemap_open("", 0, &status), ucasemap_close);
  if (U_FAILURE(status)) return Error{std::string("ICU case map unavailable: ") + u_errorName(status)};
  std::string out(text.size() + 16, '\0');
  for (int attempt = 0; attempt < 2; ++attempt) {
    status = U_ZERO_ERROR;
    int32_t length = ucasemap_utf8ToLower(map.get(), out.data(), static_cast<int32_t>(out.size()), text.data(),
                                          static_cast<int32_t>(text.size()), &status);
    if (status == U_BUFFER_OVERFLOW_ERROR) {
      out.assign(static_cast<size_t>(length), '\0');
      continue;
    }
    if (U_FAILURE(status)) return Error{std::string("lowercasing failed: ") + u_errorName(status)};
    out.resize(static_cast<size_t>(length));
    return out;
  }
  return Error{"lowercasing failed: output size changed between attempts"};
}

bool is_unicode_whitespace(char32_t cp) { return u_isUWhiteSpace(static_cast<UChar32>(cp)); }

bool is_unicode_numeric(char32_t cp) { return (U_GET_GC_MASK(static_cast<UChar32>(cp)) & U_GC_N_MASK) != 0; }

bool is_unicode_word_char(char32_t cp) {
  auto c = static_cast<UChar32>(cp);
  if (u_hasBinaryProperty(c, UCHAR_ALPHABETIC) || u_hasBinaryProperty(c, UCHAR_JOIN_CONTROL)) return true;
  int32_t mask = U_GET_GC_MASK(c);
  return (mask & (U_GC_M_MASK | U_GC_ND_MASK | U_GC_PC_MASK)) != 0;
}

}  // namespace deepinfer::tokenizer
