// Parsing of the pipeline sections of tokenizer.json: normalizer, pre_tokenizer, decoder and
// post_processor. Unsupported types are errors naming the type and the supported ones.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "core/result.h"
#include "tokenizer/decoder.h"
#include "tokenizer/json_util.h"
#include "tokenizer/normalizer.h"
#include "tokenizer/pre_tokenizer.h"

namespace deepinfer::tokenizer {

Result<Normalizer> parse_normalizer(const std::optional<JsonElement>& element, const std::string& where);
Result<PreTokenizer> parse_pre_tokenizer(const std::optional<JsonElement>& element, const std::string& where);
// nullopt: the file has no decoder (tokens are then joined with spaces).
Result<std::optional<std::vector<DecoderStep>>> parse_decoder(const std::optional<JsonElement>& element,
                                                             const std::string& where);
// Templates for a single sequence; kSequenceSlot (-1) marks the sequence.
Result<std::vector<std::vector<int32_t>>> parse_post_processor(const std::optional<JsonElement>& element,
                                                               const std::string& where);

}  // namespace deepinfer::tokenizer
