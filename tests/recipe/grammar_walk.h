// Test helpers for request-time grammars: compile a request's structured output against a real
// tokenizer, feed it text as the model's tokens, walk it with random allowed tokens, and check
// JSON values with ajv (tests/grammar/ajv_validate.cjs).
#pragma once

#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <random>

#include "engine/structured_output.h"
#include "grammar/matcher.h"
#include "node_oracle.h"
#include "oracle.h"

namespace deepinfer::test {

// One vocabulary per tokenizer for the whole process (building one takes a while).
inline std::shared_ptr<const grammar::TokenVocab> vocab_of(const Tokenizer& tokenizer) {
  static std::map<const Tokenizer*, std::shared_ptr<const grammar::TokenVocab>> vocabs;
  auto& vocab = vocabs[&tokenizer];
  if (!vocab) {
    vocab = std::make_shared<const grammar::TokenVocab>(value_or_throw(grammar::TokenVocab::from_tokenizer(tokenizer)));
  }
  return vocab;
}

inline std::shared_ptr<grammar::CompiledGrammar> compile_params(const StructuredOutputParams& params,
                                                                const Tokenizer& tokenizer) {
  auto built = grammar::build_grammar(to_grammar_spec(params));
  EXPECT_TRUE(built.ok()) << built.error().message;
  return value_or_throw(grammar::compile_grammar(std::move(*built), vocab_of(tokenizer)));
}

// Whether the grammar takes text, tokenized as the model would write it (added tokens as
// themselves), as a complete output.
inline bool accepts_text(const std::shared_ptr<grammar::CompiledGrammar>& compiled, const Tokenizer& tokenizer,
                         const std::string& text) {
  grammar::GrammarMatcher matcher(compiled);
  for (int32_t id : value_or_throw(tokenizer.encode_with_special(text))) {
    if (!matcher.accept_token(id)) return false;
  }
  return matcher.can_end();
}

// After prefix (taken as the model's tokens), random allowed non-stop tokens until the grammar
// must end (or, when it may end, after max_steps): the text a model with arbitrary weights could
// produce under the mask. When added tokens are allowed, one of them is taken half of the time,
// so markup is reached quickly.
inline std::string random_walk(const std::shared_ptr<grammar::CompiledGrammar>& compiled, const Tokenizer& tokenizer,
                               uint32_t seed, const std::string& prefix = "", int max_steps = 400) {
  grammar::GrammarMatcher matcher(compiled);
  const grammar::TokenVocab& vocab = compiled->vocab();
  std::vector<uint32_t> mask(vocab.num_mask_words());
  std::mt19937 rng(seed);
  std::vector<int32_t> ids = value_or_throw(tokenizer.encode_with_special(prefix));
  for (int32_t id : ids) EXPECT_TRUE(matcher.accept_token(id)) << prefix;
  for (int step = 0; step < 3000 && !matcher.must_end() && !(step >= max_steps && matcher.can_end()); ++step) {
    EXPECT_TRUE(matcher.fill_next_token_bitmask(mask.data())) << matcher.error();
    std::vector<int32_t> allowed, added;
    for (int32_t id = 0; id < vocab.num_tokens(); ++id) {
      if (!((mask[id / 32] >> (id % 32)) & 1) || vocab.is_stop(id)) continue;
      allowed.push_back(id);
      if (vocab.token_bytes(id) == grammar::special_token_bytes(id)) added.push_back(id);
    }
    if (allowed.empty()) break;
    const std::vector<int32_t>& pool = !added.empty() && rng() % 2 == 0 ? added : allowed;
    const int32_t token = pool[rng() % pool.size()];
    EXPECT_TRUE(matcher.accept_token(token));
    ids.push_back(token);
  }
  EXPECT_TRUE(matcher.can_end());
  return tokenizer.decode(ids, /*skip_special_tokens=*/false);
}

// ajv's verdicts: [{"schema", "instances": [json text]}] -> [[true|false|"parse error"]].
inline Json validate_with_ajv(const Json& request) { return testing::run_node_oracle("ajv_validate.cjs", request); }

// Tools with finite argument languages (bounded strings, arrays and ranges), so random walks
// end. Only get_weather is strict.
inline const Json kWeatherAndTagTools = Json::parse(R"([
  {"type": "function", "function": {"name": "get_weather", "strict": true, "parameters": {"type": "object",
    "properties": {"city": {"type": "string", "minLength": 1, "maxLength": 8},
                   "unit": {"enum": ["c", "f"]}, "days": {"type": "integer", "minimum": 1, "maximum": 14}},
    "required": ["city", "unit", "days"], "additionalProperties": false}}},
  {"type": "function", "function": {"name": "add_tags", "parameters": {"type": "object",
    "properties": {"tags": {"type": "array", "items": {"type": "string", "pattern": "^[a-z]{1,4}$"},
                            "minItems": 1, "maxItems": 3}, "pin": {"type": "boolean"}},
    "required": ["tags", "pin"], "additionalProperties": false}}}])");

}  // namespace deepinfer::test
