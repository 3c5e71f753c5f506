// The structural front end: marker-free text checked against std::string::find on every short
// string of a small alphabet; added-token literals; JSON Schema nodes and their errors.
#include <gtest/gtest.h>

#include <functional>

#include "grammar/automaton.h"
#include "grammar/matcher.h"
#include "grammar/structural.h"

namespace deepinfer::grammar {
namespace {

// One token per byte but 0xFF (which TokenVocab::from_tokenizer keeps for added tokens), and
// added tokens 300..302.
std::shared_ptr<const TokenVocab> byte_vocab() {
  std::vector<std::string> bytes(303);
  for (int b = 0; b < 255; ++b) bytes[b] = std::string(1, static_cast<char>(b));
  for (int id = 300; id < 303; ++id) bytes[id] = special_token_bytes(id);
  return std::make_shared<const TokenVocab>(std::move(bytes), std::vector<int32_t>{}, 303);
}

std::shared_ptr<CompiledGrammar> compile(const std::string& spec) {
  auto grammar = compile_structural(spec, {});
  EXPECT_TRUE(grammar.ok()) << grammar.error().message;
  return value_or_throw(compile_grammar(std::move(grammar).value(), byte_vocab()));
}

bool accepts(const std::shared_ptr<CompiledGrammar>& compiled, const std::string& text) {
  GrammarMatcher matcher(compiled);
  return matcher.accept_bytes(text) && matcher.can_end();
}

TEST(Structural, TextWithoutMatchesSubstringSearchOnEveryShortString) {
  // Overlapping markers, a marker inside another, and a multi-byte character.
  const std::vector<std::string> markers = {"<a>", "aab", "<é", "b"};
  const auto compiled = compile(R"({"text_without": ["<a>", "aab", "<é", "b"], "not_first": "a"})");
  const std::vector<std::string> alphabet = {"a", "b", "<", ">", "é", "x"};
  int checked = 0;
  std::function<void(const std::string&, int)> each = [&](const std::string& s, int depth) {
    bool expected = s.empty() || !s.starts_with("a");
    for (const std::string& m : markers) expected = expected && s.find(m) == std::string::npos;
    EXPECT_EQ(accepts(compiled, s), expected) << "'" << s << "'";
    ++checked;
    if (depth == 0) return;
    for (const std::string& c : alphabet) each(s + c, depth - 1);
  };
  each("", 5);
  EXPECT_EQ(checked, 1 + 6 + 36 + 216 + 1296 + 7776);
}

TEST(Structural, TokensAreTheirReservedBytesOnly) {
  const auto compiled = compile(R"({"seq": [{"token": 301}, "x", {"optional": {"token": 302}}]})");
  GrammarMatcher matcher(compiled);
  EXPECT_FALSE(matcher.accept_token(300));
  EXPECT_FALSE(matcher.accept_token('x'));
  EXPECT_TRUE(matcher.accept_token(301));
  EXPECT_TRUE(matcher.accept_token('x'));
  EXPECT_TRUE(matcher.can_end());
  EXPECT_TRUE(matcher.accept_token(302));
  EXPECT_TRUE(matcher.must_end());
}

TEST(Structural, JsonNodesAndAlternatives) {
  const auto compiled = compile(R"({"any": [
      {"seq": ["A:", {"json_schema": {"type": "object", "properties": {"n": {"type": "integer", "minimum": 0, "maximum": 9}},
                                      "required": ["n"]}}]},
      {"seq": ["B:", {"json_object": true}]}]})");
  EXPECT_TRUE(accepts(compiled, R"(A:{"n":3})"));
  EXPECT_FALSE(accepts(compiled, R"(A:{"n":10})"));
  EXPECT_FALSE(accepts(compiled, R"(A:{"m":3})"));
  EXPECT_TRUE(accepts(compiled, R"(B:{"m":[1,"x"]})"));
  EXPECT_FALSE(accepts(compiled, R"(B:[1])"));
}

TEST(Structural, ErrorsNameTheNode) {
  std::vector<std::string> warnings;
  auto strict = compile_structural(R"({"seq": ["a", {"json_schema": {"uniqueItems": true}}]})", {}, &warnings);
  ASSERT_FALSE(strict.ok());
  EXPECT_NE(strict.error().message.find("'#/seq/1/json_schema'"), std::string::npos) << strict.error().message;
  EXPECT_NE(strict.error().message.find("uniqueItems"), std::string::npos) << strict.error().message;
  auto lenient =
      compile_structural(R"({"seq": ["a", {"json_schema": {"uniqueItems": true}, "lenient": true}]})", {}, &warnings);
  EXPECT_TRUE(lenient.ok());
  EXPECT_EQ(warnings.size(), 1u);
  for (const char* bad : {R"({"text_without": [""]})", R"({"tokens": 3})", R"({"token": -1})", R"({"seq": []})", "[1]",
                          R"({"text_without": ["\u00e9"], "not_first": 3})"}) {
    auto result = compile_structural(bad, {});
    EXPECT_FALSE(result.ok()) << bad;
    if (!result.ok()) {
      EXPECT_NE(result.error().message.find("'#"), std::string::npos) << result.error().message;
    }
  }
}

}  // namespace
}  // namespace deepinfer::grammar
