// EBNF, regex and JSON Schema front ends through the matcher: accepted and rejected strings,
// unsupported-keyword errors, and adversarial inputs that must fail fast.
#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "grammar/front_ends.h"
#include "grammar/matcher.h"

namespace deepinfer::grammar {
namespace {

std::shared_ptr<CompiledGrammar> compiled(Result<Grammar> grammar) {
  EXPECT_TRUE(grammar.ok()) << grammar.error().message;
  auto vocab = std::make_shared<TokenVocab>(std::vector<std::string>{"a"}, std::vector<int32_t>{}, 1);
  auto result = compile_grammar(std::move(grammar).value(), vocab);
  EXPECT_TRUE(result.ok()) << result.error().message;
  return result.ok() ? *result : nullptr;
}

// Whole-string acceptance: every byte is accepted and the grammar can end afterwards.
bool accepts(const std::shared_ptr<CompiledGrammar>& g, const std::string& text) {
  GrammarMatcher m(g);
  return m.accept_bytes(text) && m.can_end();
}

TEST(Ebnf, LiteralsClassesQuantifiers) {
  auto g = compiled(compile_ebnf(R"(
    # a comment
    root ::= greeting " " name ("!" | "?")*
    greeting ::= "hi" | "hello"
    name ::= [A-Z] [a-z]{1,3}
  )"));
  EXPECT_TRUE(accepts(g, "hi Bob"));
  EXPECT_TRUE(accepts(g, "hello Anna!?!"));
  EXPECT_FALSE(accepts(g, "hi bob"));
  EXPECT_FALSE(accepts(g, "hi Bobby"));
  EXPECT_FALSE(accepts(g, "hi B"));
}

TEST(Ebnf, Utf8ClassesAndRecursion) {
  auto g = compiled(compile_ebnf(R"g(root ::= "(" root ")" | [^()\n]+ )g"));
  EXPECT_TRUE(accepts(g, "((héllo 😀))"));
  EXPECT_FALSE(accepts(g, "((x)"));
  EXPECT_FALSE(accepts(g, "\xC3"));  // half a character
}

TEST(Ebnf, Errors) {
  EXPECT_FALSE(compile_ebnf("root ::= missing").ok());
  EXPECT_FALSE(compile_ebnf("root ::= \"a").ok());
  EXPECT_FALSE(compile_ebnf("root ::= [b-a]").ok());
  EXPECT_FALSE(compile_ebnf("other ::= \"a\"").ok());
  EXPECT_FALSE(compile_ebnf("root ::= \"a\"{3,2}").ok());
}

TEST(Regex, ClassesQuantifiersAlternation) {
  auto g = compiled(compile_regex(R"(\d{3}-(?:[a-f]+|x)\.?\s\w*?)"));
  EXPECT_TRUE(accepts(g, "123-abc. foo_1"));
  EXPECT_TRUE(accepts(g, "000-x "));
  EXPECT_FALSE(accepts(g, "12-abc "));
  EXPECT_FALSE(accepts(g, "123-g "));
}

TEST(Regex, RejectsWhatItCannotEnforce) {
  EXPECT_FALSE(compile_regex("(?=a)b").ok());
  EXPECT_FALSE(compile_regex(R"((a)\1)").ok());
  EXPECT_FALSE(compile_regex(R"(a\bb)").ok());
  EXPECT_FALSE(compile_regex("a)").ok());
  EXPECT_FALSE(compile_regex("*a").ok());
}

TEST(JsonSchema, ObjectsArraysAndBounds) {
  auto g = compiled(compile_json_schema(R"({
    "type": "object",
    "properties": {
      "id": {"type": "integer", "minimum": -5, "maximum": 120},
      "tags": {"type": "array", "items": {"enum": ["a", "b"]}, "minItems": 1, "maxItems": 2},
      "when": {"type": "string", "format": "date"},
      "name": {"type": "string", "maxLength": 3}
    },
    "required": ["id"]
  })",
                                        {}));
  EXPECT_TRUE(accepts(g, R"({"id":7})"));
  EXPECT_TRUE(accepts(g, R"({"id":-5,"tags":["a","b"],"when":"2024-02-29","name":"abc"})"));
  EXPECT_TRUE(accepts(g, R"({"id":120,"name":"\"é"})"));
  EXPECT_FALSE(accepts(g, R"({"id":121})"));
  EXPECT_FALSE(accepts(g, R"({"id":-6})"));
  EXPECT_FALSE(accepts(g, R"({"id":007})"));
  EXPECT_FALSE(accepts(g, R"({"tags":["a"]})"));
  EXPECT_FALSE(accepts(g, R"({"id":1,"tags":[]})"));
  EXPECT_FALSE(accepts(g, R"({"id":1,"tags":["a","b","a"]})"));
  EXPECT_FALSE(accepts(g, R"({"id":1,"when":"2024-13-01"})"));
  EXPECT_FALSE(accepts(g, R"({"id":1,"name":"abcd"})"));
  EXPECT_FALSE(accepts(g, R"({"id":1,"other":1})"));  // strict: no additional properties
}

TEST(JsonSchema, NumberBounds) {
  auto g = compiled(compile_json_schema(R"({"type":"number","minimum":-1,"exclusiveMaximum":2})", {}));
  for (const char* ok : {"-1", "-1.000", "-0.5", "0", "0.25", "1", "1.999", "-0.0001"}) EXPECT_TRUE(accepts(g, ok)) << ok;
  for (const char* bad : {"2", "2.0", "-1.01", "-2", "10", "-0", "1e0", "01"}) EXPECT_FALSE(accepts(g, bad)) << bad;
  auto unit = compiled(compile_json_schema(R"({"type":"number","exclusiveMinimum":0,"maximum":1})", {}));
  for (const char* ok : {"0.5", "1", "1.0", "0.001"}) EXPECT_TRUE(accepts(unit, ok)) << ok;
  for (const char* bad : {"0", "0.0", "1.01", "-0.5"}) EXPECT_FALSE(accepts(unit, bad)) << bad;
  EXPECT_FALSE(compile_json_schema(R"({"type":"number","minimum":1e-20})", {}).ok());  // decimal bounds: test_schema_keywords
}

TEST(JsonSchema, RecursiveRefAnyOfAndAdditionalProperties) {
  auto g = compiled(compile_json_schema(R"({
    "$defs": {"node": {"type": "object", "properties": {"kids": {"type": "array", "items": {"$ref": "#/$defs/node"}}},
                       "additionalProperties": {"anyOf": [{"type": "null"}, {"type": "number", "minimum": 0}]}}},
    "$ref": "#/$defs/node"
  })",
                                        {}));
  EXPECT_TRUE(accepts(g, R"({"kids":[{"kids":[]},{"x":1500.5}]})"));
  EXPECT_TRUE(accepts(g, R"({"a":null,"b":0.25})"));
  EXPECT_FALSE(accepts(g, R"({"a":-1})"));
  EXPECT_FALSE(accepts(g, R"({"kids":null})"));  // a declared key cannot come in as an extra one
}

TEST(JsonSchema, UnsupportedKeywordsNameTheirPointer) {
  auto result = compile_json_schema(R"({"type":"object","properties":{"a":{"type":"array","uniqueItems":true}}})", {});
  ASSERT_FALSE(result.ok());
  EXPECT_NE(result.error().message.find("uniqueItems"), std::string::npos) << result.error().message;
  EXPECT_NE(result.error().message.find("#/properties/a/uniqueItems"), std::string::npos) << result.error().message;
  for (const char* schema : {R"({"type":"object","not":{"required":["a","b"]}})", R"({"if":{},"then":{}})",
                             R"({"type":"array","contains":{"type":"integer"}})",
                             R"({"oneOf":[{"type":"number"},{"type":"integer"}]})", R"({"$ref":"other.json#"})",
                             R"({"type":"string","format":"made-up"})"}) {
    EXPECT_FALSE(compile_json_schema(schema, {}).ok()) << schema;
  }
  JsonSchemaOptions lenient;
  lenient.lenient = true;
  std::vector<std::string> warnings;
  EXPECT_TRUE(compile_json_schema(R"({"type":"array","uniqueItems":true})", lenient, &warnings).ok());
  ASSERT_EQ(warnings.size(), 1u);
  EXPECT_NE(warnings[0].find("uniqueItems"), std::string::npos);
}

TEST(JsonSchema, DisjointOneOfIsExact) {
  auto g = compiled(compile_json_schema(R"({"oneOf":[{"type":"string"},{"type":"integer"}]})", {}));
  EXPECT_TRUE(accepts(g, "\"x\""));
  EXPECT_TRUE(accepts(g, "12"));
  EXPECT_FALSE(accepts(g, "1.5"));
}

TEST(JsonSchema, WhitespaceIsBounded) {
  JsonSchemaOptions options;
  options.max_whitespace = 2;
  auto g = compiled(compile_json_schema(R"({"type":"array","items":{"type":"integer"}})", options));
  EXPECT_TRUE(accepts(g, "[ 1 ,\n2]"));
  EXPECT_FALSE(accepts(g, "[1,   2]"));
}

TEST(Adversarial, FailFastOrCompileWithinLimits) {
  // 10k-deep nesting in each front end.
  EXPECT_FALSE(compile_ebnf("root ::= " + std::string(10000, '(') + "\"a\"" + std::string(10000, ')')).ok());
  EXPECT_FALSE(compile_regex(std::string(10000, '(') + "a" + std::string(10000, ')')).ok());
  std::string deep;
  for (int i = 0; i < 10000; ++i) deep.append(R"({"type":"array","items":)");
  deep.append("{}");
  deep.append(10000, '}');
  auto nested = compile_json_schema(deep, {});
  ASSERT_FALSE(nested.ok());
  EXPECT_NE(nested.error().message.find("deeper"), std::string::npos);
  // A 100k-entry enum compiles (or fails on the size limit) without hanging.
  std::string big_enum = R"({"enum":[)";
  for (int i = 0; i < 100000; ++i) {
    if (i > 0) big_enum.push_back(',');
    big_enum.append(std::to_string(i * 7));
  }
  big_enum += "]}";
  auto huge = compile_json_schema(big_enum, {});
  if (huge.ok()) {
    EXPECT_TRUE(accepts(compiled(std::move(huge)), "69993"));
  }
  // Pathological regexes: the automaton is built lazily, so nested stars cost nothing up front.
  auto stars = compiled(compile_regex("(a*)*b"));
  EXPECT_TRUE(accepts(stars, std::string(5000, 'a') + "b"));
  EXPECT_FALSE(accepts(stars, std::string(5000, 'a')));
  EXPECT_FALSE(compile_regex("a{1,1000000}").ok());
  // llama.cpp's "hang" grammar: six nested {0,99} build linearly; the ambiguity blows up the
  // Earley sets, which stop at the item limit with a clear error instead of hanging.
  auto nested_reps = compiled(compile_ebnf("root ::= ((((((\"x\"{0,99}){0,99}){0,99}){0,99}){0,99}){0,99})"));
  GrammarMatcher reps(nested_reps);
  bool stopped = false;
  for (int i = 0; i < 300 && !stopped; ++i) stopped = !reps.accept_bytes("x");
  if (stopped) {
    EXPECT_NE(reps.error().find("too complex"), std::string::npos);
  }
}

TEST(Matcher, RollbackAndEnd) {
  auto g = compiled(compile_choice({"yes", "no"}));
  GrammarMatcher m(g);
  EXPECT_FALSE(m.can_end());
  ASSERT_TRUE(m.accept_bytes("ye"));
  ASSERT_TRUE(m.accept_bytes("s"));
  EXPECT_TRUE(m.must_end());
  m.rollback(2);
  EXPECT_TRUE(m.accept_bytes("no"));
  EXPECT_TRUE(m.must_end());
  EXPECT_FALSE(m.accept_bytes("x"));
}

}  // namespace
}  // namespace deepinfer::grammar
