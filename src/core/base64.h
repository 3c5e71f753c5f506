// Strict base64 (RFC 4648's standard alphabet, '=' padding required): images sent inline in API
// requests arrive this way.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/result.h"

namespace deepinfer {

// The bytes text encodes. An Error naming the offset and the problem for a character outside the
// alphabet (whitespace and URL-safe '-' / '_' included), a length that is not a multiple of 4,
// misplaced padding, or nonzero bits after the last byte (a non-canonical encoding).
Result<std::vector<uint8_t>> try_decode_base64(std::string_view text);
// The canonical encoding of bytes (what try_decode_base64 reads back).
std::string encode_base64(std::span<const uint8_t> bytes);

}  // namespace deepinfer
