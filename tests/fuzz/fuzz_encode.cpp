// libFuzzer target: encode arbitrary bytes with a byte-level (Llama 3) and a SentencePiece-style
// (Mistral/Llama 2) tokenizer. Invalid UTF-8 must be an error; valid text must round-trip through
// decode and never yield a special token in plain mode.
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

namespace {

using deepinfer::Tokenizer;

const Tokenizer* g_byte_level = nullptr;
const Tokenizer* g_sentencepiece = nullptr;

const Tokenizer* load(const char* name) {
  auto loaded = Tokenizer::load(std::string(DEEPINFER_TOKENIZERS_DIR) + "/tokenizer-" + name + "/models");
  if (!loaded.ok()) {
    std::fprintf(stderr, "fuzz_encode: %s (run make deps)\n", loaded.error().message.c_str());
    std::abort();
  }
  return new Tokenizer(std::move(loaded).value());
}

// lossless: plain text must round-trip; special_splits_pad: the tokenizer's normalizer prepends
// U+2581 to every segment between special tokens (as Hugging Face's SentencePiece-style ones do), so
// text holding a special token's string gains a space after it in the special-mode round trip.
void check(const Tokenizer& tokenizer, std::string_view text, bool lossless, bool special_splits_pad) {
  bool valid = deepinfer::tokenizer::find_invalid_utf8(text) == SIZE_MAX;
  auto plain = tokenizer.encode(text);
  auto special = tokenizer.encode_with_special(text);
  if (plain.ok() != valid || special.ok() != valid) std::abort();
  if (!valid) return;
  for (int32_t id : *plain)
    if (tokenizer.is_special(id)) std::abort();
  if (!lossless) return;
  if (tokenizer.decode(*plain, false) != text) std::abort();
  bool has_special = false;
  for (int32_t id : *special) has_special = has_special || tokenizer.is_special(id);
  if (!(special_splits_pad && has_special) && tokenizer.decode(*special, false) != text) std::abort();
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  g_byte_level = load("llama3");
  g_sentencepiece = load("llama2");
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  check(*g_byte_level, text, true, false);
  // The SentencePiece decoder turns U+2581 into a space, so only text without it round-trips.
  check(*g_sentencepiece, text, text.find("\xE2\x96\x81") == std::string_view::npos, true);
  return 0;
}
