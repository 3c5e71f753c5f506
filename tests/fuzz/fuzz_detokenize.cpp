// libFuzzer target: decode arbitrary id sequences one at a time and in one go. Streaming output
// must be whole UTF-8 characters and concatenate to the one-shot decode.
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

namespace {

using deepinfer::StreamingDetokenizer;
using deepinfer::Tokenizer;

const Tokenizer* g_tokenizers[2] = {nullptr, nullptr};

const Tokenizer* load(const char* name) {
  auto loaded = Tokenizer::load(std::string(DEEPINFER_TOKENIZERS_DIR) + "/tokenizer-" + name + "/models");
  if (!loaded.ok()) {
    std::fprintf(stderr, "fuzz_detokenize: %s (run make deps)\n", loaded.error().message.c_str());
    std::abort();
  }
  return new Tokenizer(std::move(loaded).value());
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  g_tokenizers[0] = load("llama3");
  g_tokenizers[1] = load("llama2");
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const Tokenizer& tokenizer = *g_tokenizers[data[0] & 1];
  bool skip_special = (data[0] & 2) != 0;
  // Ids: 2 bytes each; a set top bit picks a low id (byte tokens), to make split characters common.
  std::vector<int32_t> ids;
  for (size_t i = 1; i + 1 < size; i += 2) {
    uint32_t raw = data[i] | (static_cast<uint32_t>(data[i + 1]) << 8);
    uint32_t id = (raw & 0x8000) ? (raw & 0x1FF) : raw * 7;
    ids.push_back(static_cast<int32_t>(id % static_cast<uint32_t>(tokenizer.vocab_size() + 16)));
  }
  std::string one_shot = tokenizer.decode(ids, skip_special);
  StreamingDetokenizer detokenizer(tokenizer, skip_special);
  std::string streamed;
  for (int32_t id : ids) {
    std::string piece = detokenizer.push(id);
    if (deepinfer::tokenizer::find_invalid_utf8(piece) != SIZE_MAX) std::abort();
    streamed += piece;
  }
  streamed += detokenizer.flush();
  if (streamed != one_shot) std::abort();
  return 0;
}
