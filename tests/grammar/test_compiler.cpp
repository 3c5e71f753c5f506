// The compilation service (cache, timeout, cancellation, failure isolation) and the token mask
// against brute force: every token's bytes fed through a fresh matcher.
#include <gtest/gtest.h>

#include <random>

#include "grammar/compiler.h"

namespace deepinfer::grammar {
namespace {

// A synthetic vocabulary: single bytes, JSON fragments, multi-byte UTF-8 pieces (some cut in
// the middle of a character), a stop token and padded ids beyond the tokenizer.
std::shared_ptr<TokenVocab> test_vocab() {
  std::vector<std::string> tokens;
  for (int b = 0; b < 256; ++b) tokens.emplace_back(1, static_cast<char>(b));
  for (const char* t : {"{\"", "\":", "\",\"", "true", "false", "null", "\"}", "[1,", "12", "0.5", "e+", "\\u00",
                        "\\n", " \"", "name", "\"name\":\"", "é", "\xC3", "\xA9\"", "😀", "\xF0\x9F", "ab\"}", "]}", "-0"}) {
    tokens.emplace_back(t);
  }
  tokens.emplace_back("");  // the stop token (id 280)
  const auto stop = static_cast<int32_t>(tokens.size() - 1);
  return std::make_shared<TokenVocab>(tokens, std::vector<int32_t>{stop}, static_cast<int32_t>(tokens.size()) + 7);
}

TEST(TokenMask, EqualsBruteForceAlongRandomWalks) {
  auto vocab = test_vocab();
  const char* schemas[] = {
      R"({"type":"object","properties":{"name":{"type":"string","maxLength":4},"n":{"type":"number"},"ok":{"type":"boolean"}},"required":["name"]})",
      R"({"type":"array","items":{"anyOf":[{"type":"integer","minimum":-3,"maximum":40},{"enum":["é","😀"]}]}})",
  };
  std::mt19937 rng(7);
  for (const char* schema : schemas) {
    auto grammar = compile_json_schema(schema, {});
    ASSERT_TRUE(grammar.ok()) << grammar.error().message;
    auto compiled = compile_grammar(std::move(grammar).value(), vocab);
    ASSERT_TRUE(compiled.ok());
    for (int walk = 0; walk < 5; ++walk) {
      GrammarMatcher matcher(*compiled);
      std::vector<uint32_t> mask(static_cast<size_t>(vocab->num_mask_words()));
      for (int step = 0; step < 30; ++step) {
        const bool any = matcher.fill_next_token_bitmask(mask.data());
        std::vector<int32_t> allowed;
        for (int32_t id = 0; id < vocab->mask_size(); ++id) {
          const bool in_mask = (mask[id >> 5] >> (id & 31)) & 1;
          GrammarMatcher probe = matcher;
          const bool brute = probe.accept_token(id);
          ASSERT_EQ(in_mask, brute) << schema << " step " << step << " id " << id;
          if (in_mask) allowed.push_back(id);
        }
        ASSERT_EQ(any, !allowed.empty());
        if (allowed.empty()) break;
        const int32_t token = allowed[rng() % allowed.size()];
        ASSERT_TRUE(matcher.accept_token(token));
        if (matcher.is_terminated()) break;
      }
      // Rollback returns to the start state: the first mask is reproduced.
      std::vector<uint32_t> first(mask.size()), again(mask.size());
      GrammarMatcher fresh(*compiled);
      fresh.fill_next_token_bitmask(first.data());
      matcher.rollback(matcher.num_accepted_tokens());
      matcher.fill_next_token_bitmask(again.data());
      EXPECT_EQ(first, again);
    }
  }
}

GrammarCompilerService::Options small_options() {
  GrammarCompilerService::Options options;
  options.num_threads = 2;
  options.cache_entries = 4;
  return options;
}

GrammarSpec schema_spec(std::string text) {
  GrammarSpec spec;
  spec.kind = GrammarSpec::Kind::kJsonSchema;
  spec.text = std::move(text);
  return spec;
}

TEST(CompilerService, CachesAndIsolatesFailures) {
  GrammarCompilerService service(test_vocab(), small_options());
  auto good = service.compile(schema_spec(R"({"type":"integer"})"));
  auto bad = service.compile(schema_spec(R"({"type":"integer","not":{}})"));
  ASSERT_TRUE(good.result.get().ok());
  ASSERT_FALSE(bad.result.get().ok());
  EXPECT_NE(bad.result.get().error().message.find("'not'"), std::string::npos);
  auto again = service.compile(schema_spec(R"({"type":"integer"})"));
  EXPECT_TRUE(again.cache_hit);
  EXPECT_EQ(again.result.get().value().get(), good.result.get().value().get());
}

TEST(CompilerService, TimeoutAndCancellationStopTheWork) {
  auto options = small_options();
  options.timeout_seconds = 0.02;
  options.max_symbols = 100'000'000;
  GrammarCompilerService service(test_vocab(), options);
  // Thousands of large bounded strings: far more work than 20 ms.
  std::string schema = R"({"type":"object","properties":{)";
  for (int i = 0; i < 3000; ++i) {
    if (i > 0) schema.push_back(',');
    // Distinct bounds, so no two properties share their repetition rules.
    schema.append("\"p").append(std::to_string(i)).append(R"(":{"type":"string","maxLength":)");
    schema.append(std::to_string(5000 + i)).append("}");
  }
  schema += "}}";
  auto slow = service.compile(schema_spec(schema));
  const auto result = slow.result.get();
  ASSERT_FALSE(result.ok());
  EXPECT_NE(result.error().message.find("timed out"), std::string::npos) << result.error().message;

  options.timeout_seconds = 60;
  GrammarCompilerService patient(test_vocab(), options);
  auto cancelled = patient.compile(schema_spec(schema));
  patient.cancel(cancelled);
  const auto outcome = cancelled.result.get();
  if (!outcome.ok()) {
    EXPECT_NE(outcome.error().message.find("cancelled"), std::string::npos) << outcome.error().message;
  }
  EXPECT_FALSE(patient.compile(schema_spec(schema)).cache_hit);
}

}  // namespace
}  // namespace deepinfer::grammar
