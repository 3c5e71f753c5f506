// Token masks through the vocabulary's character-class split (class_mask.cpp) against brute
// force (each token's bytes fed through a copy of the matcher), on grammars whose states loop
// or count over large classes: JSON strings bounded and not, patterns, non-ASCII classes.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "grammar/front_ends.h"
#include "grammar/matcher.h"
#include "grammar/token_classes.h"

namespace deepinfer::grammar {
namespace {

// Single bytes, random ASCII words (some with quotes and backslashes), tokens longer than
// TokenClassIndex::kMaxCounted code points, well-formed and cut or malformed UTF-8, escapes,
// an added-token-like 0xFF token, a stop token and padded ids.
std::shared_ptr<TokenVocab> class_vocab() {
  std::vector<std::string> tokens;
  for (int b = 0; b < 256; ++b) tokens.emplace_back(1, static_cast<char>(b));
  std::mt19937 rng(11);
  const std::string alphabet = "abcdefghijklmnopqrstuvwxyzABCZ0123456789 -_.,:;/\"\\{}[]";
  for (int i = 0; i < 700; ++i) {
    std::string word;
    const size_t n = 1 + rng() % 12;
    for (size_t k = 0; k < n; ++k) word.push_back(alphabet[rng() % (k == 0 ? alphabet.size() : 30)]);
    tokens.push_back(word);
  }
  for (int n : {31, 32, 33, 40, 45, 60, 90}) {
    tokens.emplace_back(static_cast<size_t>(n), ' ');
    tokens.emplace_back(static_cast<size_t>(n), 'a');
    std::string han;
    for (int k = 0; k < n; ++k) han += "\xE4\xB8\xAD";  // 中
    tokens.push_back(han);
    tokens.push_back(std::string(static_cast<size_t>(n), 'b') + "\"");
  }
  for (const char* t : {"\xC3\xA9", "caf\xC3\xA9", "\xE4\xB8\xAD\xE6\x96\x87", "\xF0\x9F\x98\x80", "\xE4\xB8",
                        "\xAD", "\xF0\x9F\x98", "x\xC3", "\xC0\x80", "\xED\xA0\x80", "\xF4\x90\x80\x80",
                        "\xFF\x00\x00\x07", "\\n", "\\u00e9", "\\\"", "a\\\"b", "\",\"", "\":\"", "\"}", "\xC3\xA9\"",
                        "\":", "{\"", "\"]", "-12", "2024-02-29", "\xC3\xA9t\xC3\xA9 ", "\t", "\n\n"}) {
    tokens.emplace_back(t);
  }
  tokens.emplace_back("");  // the stop token
  const auto stop = static_cast<int32_t>(tokens.size() - 1);
  return std::make_shared<TokenVocab>(tokens, std::vector<int32_t>{stop}, static_cast<int32_t>(tokens.size()) + 5);
}

void expect_masks_match_brute_force(const std::string& what, Result<Grammar> grammar, int num_walks, int num_steps) {
  ASSERT_TRUE(grammar.ok()) << what << ": " << grammar.error().message;
  auto vocab = class_vocab();
  auto compiled = compile_grammar(std::move(grammar).value(), vocab);
  ASSERT_TRUE(compiled.ok());
  std::mt19937 rng(3);
  std::vector<uint32_t> mask(static_cast<size_t>(vocab->num_mask_words()));
  for (int walk = 0; walk < num_walks; ++walk) {
    GrammarMatcher matcher(*compiled);
    for (int step = 0; step < num_steps; ++step) {
      const bool any = matcher.fill_next_token_bitmask(mask.data());
      std::vector<int32_t> allowed;
      for (int32_t id = 0; id < vocab->mask_size(); ++id) {
        const bool in_mask = (mask[id >> 5] >> (id & 31)) & 1;
        GrammarMatcher probe = matcher;
        ASSERT_EQ(in_mask, probe.accept_token(id)) << what << " walk " << walk << " step " << step << " token "
                                                   << id << " '" << vocab->token_bytes(id) << "'";
        if (in_mask && !vocab->is_stop(id)) allowed.push_back(id);
      }
      ASSERT_EQ(any, !allowed.empty() || matcher.can_end());
      if (allowed.empty()) break;
      ASSERT_TRUE(matcher.accept_token(allowed[rng() % allowed.size()]));
    }
  }
}

TEST(ClassMask, JsonStringsBoundedAndUnbounded) {
  expect_masks_match_brute_force("strings", compile_json_schema(R"({"type":"object","properties":{
      "free":{"type":"string"}, "short":{"type":"string","maxLength":3},
      "mid":{"type":"string","minLength":2,"maxLength":40}, "long":{"type":"string","minLength":35,"maxLength":100},
      "tags":{"type":"array","items":{"type":"string","maxLength":33}}},
      "required":["free","short","mid","long","tags"]})",
                                                                {}),
                                 6, 40);
}

TEST(ClassMask, PatternsAndJsonObjects) {
  expect_masks_match_brute_force(
      "pattern", compile_json_schema(R"({"type":"object","properties":{"p":{"type":"string","pattern":"^[a-z ]{2,50}$"},
      "d":{"type":"string","format":"date"},"e":{"type":"string","pattern":"^[^x]*x[A-Za-z0-9]+$"}},
      "required":["p","d","e"]})",
                                     {}),
      4, 30);
  expect_masks_match_brute_force("json object", compile_json_object({}), 4, 30);
}

TEST(ClassMask, NonAsciiClassesAndCountedRepeats) {
  // é is the only non-ASCII character allowed: multi-byte characters disagree, so they are
  // walked; 中 is allowed in the brackets' body, and the body counts up to 60.
  expect_masks_match_brute_force("ebnf", compile_ebnf(R"(
    root ::= "<" [^<>]{0,60} ">" [a-z\u00e9 ]* ("." | "\"")
  )"),
                                 4, 30);
  expect_masks_match_brute_force("regex", compile_regex(R"([A-Za-z0-9 ]{3,45}(-[0-9]+)?)"), 4, 30);
}

TEST(ClassMask, SplitCountsCodePoints) {
  auto vocab = class_vocab();
  CharClass letters;
  letters.ascii.add_range('a', 'z');
  letters.multibyte = true;
  const auto index = vocab->token_classes().get(*vocab, letters);
  const auto is_set = [](const std::vector<uint32_t>& mask, int32_t id) { return ((mask[id >> 5] >> (id & 31)) & 1) != 0; };
  for (int32_t id = 0; id < vocab->num_tokens(); ++id) {
    const std::string& bytes = vocab->token_bytes(id);
    if (bytes == "caf\xC3\xA9") {
      EXPECT_FALSE(is_set(index->prefix_masks[3], id));
      EXPECT_TRUE(is_set(index->prefix_masks[4], id));  // four code points, five bytes
    }
    if (bytes == "x\xC3" || bytes == "\xED\xA0\x80") {
      EXPECT_FALSE(is_set(index->inside_mask, id)) << bytes;
    }
  }
  // The same class is one shared split.
  EXPECT_EQ(index.get(), vocab->token_classes().get(*vocab, letters).get());
}

}  // namespace
}  // namespace deepinfer::grammar
