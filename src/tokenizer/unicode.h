// Unicode services the tokenizer needs beyond UTF-8 (normalization forms, case mapping, character
// properties), implemented with ICU.
#pragma once

#include <string>
#include <string_view>

#include "core/result.h"

namespace deepinfer::tokenizer {

enum class NormalForm { kNfc, kNfd, kNfkc, kNfkd };

// Normalizes valid UTF-8 text; returns false (leaving out untouched) when text is already in
// that form, so the common case costs one scan and no copy.
Result<bool> normalize_unicode(NormalForm form, std::string_view text, std::string& out);

// Full Unicode lowercase mapping (root locale, final sigma included), as Rust's to_lowercase.
Result<std::string> to_lower_unicode(std::string_view text);

// Unicode White_Space (Rust's char::is_whitespace and regex \s).
bool is_unicode_whitespace(char32_t cp);

// Rust's char::is_numeric: general category Nd, Nl or No.
bool is_unicode_numeric(char32_t cp);

// Rust regex's Unicode \w: Alphabetic, Mark, Decimal_Number, Connector_Punctuation, Join_Control.
bool is_unicode_word_char(char32_t cp);

}  // namespace deepinfer::tokenizer
