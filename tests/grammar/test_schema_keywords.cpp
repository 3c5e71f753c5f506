// JSON Schema keywords beyond the basics (not, patternProperties, min/maxProperties,
// dependencies, multipleOf, oneOf disjointness, enum/const checked against every keyword):
// each schema's verdicts on valid and invalid instances against ajv (ajv_validate.cjs) as the
// oracle. Exact keywords must agree with ajv; sound restrictions may only reject more.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <future>
#include <nlohmann/json.hpp>
#include <thread>

#include "grammar/front_ends.h"
#include "grammar/matcher.h"
#include "node_oracle.h"

namespace deepinfer::grammar {
namespace {

using Json = nlohmann::ordered_json;

Json validate_with_ajv(const Json& request) { return testing::run_node_oracle("ajv_validate.cjs", request); }

struct Case {
  const char* schema;
  std::vector<const char*> instances;
  // false: a documented sound restriction (docs/structured_output.md): ours may reject a valid
  // instance but never accepts an invalid one.
  bool exact = true;
  bool strict_properties = true;
};

const std::vector<Case>& cases() {
  static const std::vector<Case> all = {
      // not: of a type, of one required key, of propertyNames false, of not, of anyOf.
      {R"({"not":{"type":"string"}})", {R"("a")", "1", "null", "{}", "[1]", "true"}},
      {R"({"type":"object","properties":{"a":{"type":"integer"},"b":{"type":"integer"}},"not":{"required":["b"]}})",
       {R"({"a":1})", R"({"a":1,"b":2})", "{}", R"({"c":1})", R"({"c":1,"b":1})", "1"},
       true, false},
      {R"({"not":{"propertyNames":false}})", {"{}", R"({"a":1})", "1", R"("s")"}},
      {R"({"type":"object","properties":{"a":{}},"additionalProperties":false,"not":{"not":{"required":["a"]}}})",
       {"{}", R"({"a":1})"}},
      {R"({"not":{"anyOf":[{"type":"null"},{"type":"boolean"},{"type":"object"}]}})", {"null", "true", "{}", "[]", "1"}},
      {R"({"$defs":{"o":{"type":"object","properties":{"a":{},"b":{}},"additionalProperties":false}},"$ref":"#/$defs/o","not":{"required":["b"]}})",
       {R"({"a":1})", R"({"a":1,"b":2})", R"({"b":2})", "{}"}},
      {R"({"$defs":{"o":{"type":"object","properties":{"a":{},"b":{}},"additionalProperties":false}},"allOf":[{"$ref":"#/$defs/o"}],"not":{"required":["b"]}})",
       {R"({"a":1})", R"({"a":1,"b":2})"}},
      // enum/const values checked against every keyword, including ones a grammar cannot express.
      {R"({"type":"string","enum":["a","bb","ccc"],"minLength":2})", {R"("a")", R"("bb")", R"("ccc")"}},
      {R"({"enum":["a","b","c"],"not":{"enum":["b"]}})", {R"("a")", R"("b")", R"("c")"}},
      {R"({"allOf":[{"enum":[{"bar":2,"foo":1,"quux":true}]},{"not":{"not":{"properties":{"bar":{},"foo":{}}}}}]})",
       {R"({"bar":2,"foo":1,"quux":true})", R"({"bar":2,"foo":1,"quux":true,"x":1})"}},
      {R"({"enum":[[1,1],[1,2]],"uniqueItems":true})", {"[1,1]", "[1,2]"}},
      {R"({"enum":[{"k":"x","v":1},{"k":"x","v":"s"},{"k":"y","v":"s"}],"if":{"properties":{"k":{"const":"x"}}},"then":{"properties":{"v":{"type":"integer"}}}})",
       {R"({"k":"x","v":1})", R"({"k":"x","v":"s"})", R"({"k":"y","v":"s"})"}},
      {R"({"enum":[{"ab":1,"c":2},{"ab":"x","c":2}],"patternProperties":{"^a":{"type":"string"}}})",
       {R"({"ab":1,"c":2})", R"({"ab":"x","c":2})"}},
      {R"({"enum":[{"ab":"x"},{"b":1},{"b":1,"c":2}],"patternProperties":{"^a":{"type":"string"}},"maxProperties":1,"dependencies":{"ab":["c"]}})",
       {R"({"ab":"x"})", R"({"b":1})", R"({"b":1,"c":2})"}},
      {R"({"enum":[0,1.0,2],"multipleOf":2})", {"0", "1.0", "2"}},
      // patternProperties (closed objects: the pattern keys are the only extra keys).
      {R"({"type":"object","patternProperties":{"^x-[a-z]+$":{"type":"integer"}},"additionalProperties":false})",
       {R"({"x-ab":1})", R"({"x-ab":"s"})", R"({"y":1})", "{}", R"({"x-a":1,"x-b":2})", R"({"x-":1})"}},
      {R"({"type":"object","properties":{"name":{"type":"string"}},"patternProperties":{"^[0-9]+$":{"type":"boolean"}},"additionalProperties":false})",
       {R"({"name":"a","12":true})", R"({"name":"a","12":1})", R"({"name":"a","x":1})", R"({"7":false})"}},
      {R"({"type":"object","patternProperties":{"^a":{"type":"integer"},"b$":{"type":"integer"}},"additionalProperties":false})",
       {R"({"ab":1})", R"({"cb":2,"ax":3})", R"({"c":1})", R"({"ab":"1"})"}},
      // A pattern every key matches: its schema applies to declared properties too.
      {R"({"type":"object","properties":{"a":{"type":"integer"}},"patternProperties":{".*":{"minimum":0}}})",
       {R"({"a":1})", R"({"a":-1})", R"({"a":1,"b":2})", R"({"b":-2})", R"({"b":"s"})"}},
      {R"({"type":"object","patternProperties":{"^[a-z]*":{"type":"string"}},"additionalProperties":false})",
       {R"({"A":"x"})", R"({"A":1})", "{}"}},
      // minProperties / maxProperties, with and without extra keys.
      {R"({"type":"object","properties":{"a":{},"b":{},"c":{}},"minProperties":2,"maxProperties":2,"additionalProperties":false})",
       {R"({"a":1,"b":2})", R"({"a":1})", R"({"a":1,"b":2,"c":3})", "{}", R"({"b":1,"c":2})"}},
      {R"({"type":"object","properties":{"a":{"type":"integer"}},"additionalProperties":{"type":"string"},"minProperties":1,"maxProperties":2})",
       {"{}", R"({"a":1})", R"({"a":1,"x":"s"})", R"({"a":1,"x":"s","y":"t"})", R"({"x":"s"})", R"({"x":"s","y":"t"})"}},
      // dependencies (lists and {required} schemas), also on names the object cannot have.
      {R"({"type":"object","properties":{"card":{"type":"string"},"billing":{"type":"string"}},"dependencies":{"card":["billing"]},"additionalProperties":false})",
       {R"({"card":"1","billing":"x"})", R"({"card":"1"})", R"({"billing":"x"})", "{}"}},
      {R"({"type":"object","properties":{"a":{},"b":{},"c":{}},"dependencies":{"a":{"required":["c"]},"b":["a"]},"additionalProperties":false})",
       {R"({"a":1,"c":1})", R"({"a":1})", R"({"a":1,"b":1,"c":1})", R"({"b":1,"c":1})", R"({"c":1})"}},
      {R"({"type":"object","properties":{"base":{"type":"number"},"side":{"type":"number"}},"dependencies":{"base":["triangle"]},"additionalProperties":false})",
       {R"({"base":1})", "{}", R"({"side":2})"}},
      {R"({"type":"object","allOf":[{"dependencies":{"a":["b","c"],"b":["d"]}},{"required":["a"]}]})",
       {R"({"a":"v","b":"v","c":"v","d":"v"})", R"({"a":"v","b":"v","c":"v"})", R"({"a":"v","c":"v"})"}},
      // multipleOf: exact on integers; on numbers integers or at most d decimals (sound).
      {R"({"type":"integer","multipleOf":7})", {"0", "7", "14", "-21", "700", "8", "15", "1", "-1"}},
      {R"({"type":"integer","multipleOf":0.5})", {"3", "-4", "3.5"}},
      // (Not 0.07: ajv's floating-point division calls it no multiple of 0.01; we accept it.)
      {R"({"type":"number","multipleOf":0.01})", {"1.25", "1.255", "3", "-0.5", "0.1"}, false},
      {R"({"type":"number","multipleOf":1})", {"3", "3.5", "-12", "3.0"}, false},
      {R"({"type":"number","multipleOf":5})", {"10", "12", "-5"}, false},
      // oneOf whose branches are disjoint: closed objects, types through nested anyOf, nested enums.
      {R"({"oneOf":[{"type":"object","properties":{"module":{"type":"string"}},"required":["module"],"additionalProperties":false},{"type":"object","properties":{"plugin":{"type":"string"}},"required":["plugin"],"additionalProperties":false}]})",
       {R"({"module":"a"})", R"({"plugin":"b"})", R"({"module":"a","plugin":"b"})", "{}"}},
      {R"({"oneOf":[{"anyOf":[{"type":"string","pattern":"^a"},{"type":"string","pattern":"^b"}]},{"type":"object"}]})",
       {R"("ax")", R"("c")", "{}", R"({"k":1})"}},
      {R"({"oneOf":[{"oneOf":[{"enum":["a","b"]},{"enum":["c"]}]},{"enum":["d"]}]})", {R"("a")", R"("c")", R"("d")", R"("e")"}},
      {R"({"oneOf":[{"properties":{"key":{"type":"string"}},"additionalProperties":false},{"properties":{"keys":{"type":"array"}},"additionalProperties":false}],"type":"object"})",
       {R"({"key":"a"})", R"({"keys":[]})", "{}", R"({"key":"a","keys":[]})"}},
      {R"({"oneOf":[{"properties":{"key":{"type":"string"}},"required":["key"],"additionalProperties":false},{"properties":{"keys":{"type":"array"}},"additionalProperties":false}],"type":"object"})",
       {R"({"key":"a"})", R"({"keys":[]})", "{}"}},
      {R"({"oneOf":[{"enum":["any",""]},{"type":"string","pattern":"^\\d+\\.\\d+$"},{"type":"string","pattern":"^[<>]=?\\d"},{"type":"string","pattern":"^\\^\\d"}]})",
       {R"("any")", R"("")", R"("1.2")", R"(">=3")", R"("^1")", R"("~1")", R"("1.x")"}},
      // allOf of two $refs is merged.
      {R"({"definitions":{"A":{"type":"object","properties":{"a":{"type":"integer"}}},"B":{"properties":{"b":{"type":"string"}},"required":["b"]}},"allOf":[{"$ref":"#/definitions/A"},{"$ref":"#/definitions/B"}]})",
       {R"({"a":1,"b":"x"})", R"({"a":1})", R"({"b":"x"})", R"({"a":"1","b":"x"})"}},
      {R"({"type":"string","format":"idn-email"})", {R"("a.b@example.com")", R"("a@b")", R"("@x.org")"}, false},
      // Anchors inside a group that is a whole top-level alternative.
      {R"x({"type":"string","pattern":"(^gs://(.+))|(^https?://(.+))"})x",
       {R"("gs://b")", R"("https://x")", R"("x https://y")", R"("gs://")", R"("ftp://z")"}},
      {R"x({"type":"string","pattern":"^$|(^(?:\\S+\\s+){0,2}\\S+$)"})x", {R"("")", R"("a b c")", R"("a b c d")", R"(" a")"}},
      // minLength / maxLength next to a pattern: implied by it, or folded into a single repeat.
      {R"({"type":"string","pattern":"^[a-z_.]+$","maxLength":3})", {R"("ab")", R"("abc")", R"("abcd")", R"("")", R"("a-b")"}},
      {R"({"type":"string","pattern":"^\\d{2,}$","minLength":3,"maxLength":4})", {R"("12")", R"("123")", R"("12345")"}},
      {R"x({"type":"string","minLength":1,"pattern":"^(([a-z0-9]+)(-?))+$"})x", {R"("a-b")", R"("")", R"("-a")", R"("ab-")"}},
      // Decimal bounds on numbers.
      {R"({"type":"number","minimum":0.1})", {"0.1", "0.05", "0", "0.10", "1", "-1", "0.1000001", "0.09999", "3.5"}},
      {R"({"type":"number","exclusiveMinimum":-1.5,"maximum":2.25})",
       {"-1.5", "-1.49", "-1.51", "2.25", "2.250", "2.26", "0", "-0.7", "2", "-1", "2.2499"}},
      {R"({"type":"number","minimum":-3.75,"exclusiveMaximum":-1.2})",
       {"-1.2", "-1.21", "-3.75", "-3.76", "-2", "0", "-1.19", "-1.2000001"}},
      {R"({"type":"number","minimum":0,"maximum":0.5})", {"0", "0.5", "0.51", "0.49", "1", "-0.1", "0.500"}},
      // Unsupported keywords in forms that constrain nothing.
      {R"({"type":"array","items":{"type":"integer"},"uniqueItems":false})", {"[1,1]", "[]", R"(["a"])"}},
      {R"({"type":"array","maxItems":1,"uniqueItems":true})", {"[1]", "[]", "[1,2]"}},
      {R"({"type":"integer","if":{"minimum":3}})", {"1", "5"}},
      {R"({"type":"integer","then":{"minimum":3},"else":{"maximum":0}})", {"1", "5"}},
      // OpenAPI's byte format (base64).
      {R"({"type":"string","format":"byte"})", {R"("aGVsbG8=")", R"("aGVsbG8")", R"("")", R"("aGk=")", R"("a===")"}},
  };
  return all;
}

bool accepts(const Grammar& grammar, const std::string& text) {
  auto vocab = std::make_shared<TokenVocab>(std::vector<std::string>{"a"}, std::vector<int32_t>{}, 1);
  auto compiled = compile_grammar(grammar, vocab);
  if (!compiled.ok()) return false;
  GrammarMatcher m(*compiled);
  return m.accept_bytes(text) && m.can_end();
}

TEST(SchemaKeywords, VerdictsMatchAjv) {
  Json request = Json::array();
  for (const auto& c : cases()) {
    Json instances = Json::array();
    for (const char* i : c.instances) instances.push_back(i);
    request.push_back({{"schema", Json::parse(c.schema)}, {"instances", instances}});
  }
  const Json answer = validate_with_ajv(request);
  ASSERT_TRUE(answer.is_array());
  for (size_t k = 0; k < cases().size(); ++k) {
    const Case& c = cases()[k];
    JsonSchemaOptions options;
    options.strict_properties = c.strict_properties;
    auto grammar = compile_json_schema(c.schema, options);
    ASSERT_TRUE(grammar.ok()) << c.schema << ": " << grammar.error().message;
    int accepted = 0;
    for (size_t i = 0; i < c.instances.size(); ++i) {
      const bool ours = accepts(*grammar, c.instances[i]);
      const bool valid = answer[k][i] == Json(true);
      accepted += ours;
      if (c.exact) {
        EXPECT_EQ(ours, valid) << c.schema << " on " << c.instances[i];
      } else {
        EXPECT_FALSE(ours && !valid) << c.schema << " accepts invalid " << c.instances[i];
      }
    }
    EXPECT_GT(accepted, 0) << c.schema << " accepts none of its instances";
  }
}

// Forms without an exact grammar stay errors that name the keyword and its pointer; lenient
// mode drops them with a warning.
TEST(SchemaKeywords, InexpressibleFormsAreErrors) {
  const std::vector<std::pair<const char*, const char*>> errors = {
      {R"({"type":"number","not":{"type":"integer"}})", "'not' of 'integer' where numbers are allowed at '#/not'"},
      {R"({"oneOf":[{"type":"string","pattern":"^a"},{"type":"string","pattern":"b$"}]})", "may overlap"},
      {R"({"type":"object","not":{"required":["a","b"]}})", "keyword 'not' at '#/not'"},
      {R"({"type":"array","items":{"type":"string"},"uniqueItems":true})", "keyword 'uniqueItems' at '#/uniqueItems'"},
      {R"({"type":"object","patternProperties":{"^a":{"type":"integer"}},"additionalProperties":{"type":"string"}})",
       "'patternProperties' next to an 'additionalProperties' that allows keys at '#/patternProperties'"},
      {R"({"type":"object","properties":{"ab":{}},"patternProperties":{"^a":{"type":"integer"}},"additionalProperties":false})",
       "'patternProperties' whose pattern matches declared property 'ab'"},
      {R"({"type":"integer","multipleOf":3,"minimum":1})", "'multipleOf' together with bounds at '#/multipleOf'"},
      {R"({"type":"string","pattern":"^a+b$","maxLength":4})", "'minLength'/'maxLength' together with 'pattern' at '#/pattern'"},
      {R"({"type":"number","multipleOf":0.3})", "'multipleOf' other than an integer or 10^-d at '#/multipleOf'"},
      {R"({"type":"number","minimum":0.2,"maximum":0.7})", "'number' bounds whose fractions differ within one integer"},
      {R"({"enum":["a","b"],"format":"no-such-format"})", "format 'no-such-format' at '#/format'"},
  };
  for (const auto& [schema, message] : errors) {
    auto grammar = compile_json_schema(schema, {});
    ASSERT_FALSE(grammar.ok()) << schema;
    EXPECT_NE(grammar.error().message.find(message), std::string::npos) << grammar.error().message;
    JsonSchemaOptions lenient;
    lenient.lenient = true;
    std::vector<std::string> warnings;
    EXPECT_TRUE(compile_json_schema(schema, lenient, &warnings).ok()) << schema;
    EXPECT_FALSE(warnings.empty()) << schema;
  }
  // Constraints that leave nothing are errors, not grammars that accept nothing.
  EXPECT_FALSE(compile_json_schema(R"({"enum":["a"],"not":{"const":"a"}})", {}).ok());
  EXPECT_FALSE(compile_json_schema(R"({"type":"object","required":["a"],"not":{"required":["a"]}})", {}).ok());
  EXPECT_FALSE(
      compile_json_schema(R"({"type":"object","properties":{"a":{}},"minProperties":2,"additionalProperties":false})", {})
          .ok());
}

// Runs fn on its own thread; a call still running after the bound (a backtracking regex that
// hangs) ends the process with a failure instead of hanging the test run.
template <typename F>
auto within_bound(const char* what, F fn) {
  constexpr auto kBound = std::chrono::seconds(20);
  std::packaged_task<decltype(fn())()> task(std::move(fn));
  auto done = task.get_future();
  std::thread(std::move(task)).detach();
  if (done.wait_for(kBound) != std::future_status::ready) {
    std::fprintf(stderr, "FAILED: %s still running after %lld s\n", what, static_cast<long long>(kBound.count()));
    std::fflush(stderr);
    std::_Exit(1);
  }
  return done.get();
}

// enum/const values and patternProperties keys are checked against patterns that make a
// backtracking matcher take exponential time or overflow its stack: the verdicts still come
// (linear in the text) and are right.
TEST(SchemaKeywords, CatastrophicPatternsAreCheckedInLinearTime) {
  const std::string long_a(10'000, 'a');
  struct PatternCase {
    std::string pattern;
    std::string matching;      // a value the pattern accepts
    std::string not_matching;  // a value that makes backtracking explode
  };
  const std::vector<PatternCase> cases = {
      {"^(a+)+$", "aaaa", std::string(45, 'a') + "b"},
      {"^(a+)+$", long_a, long_a + "!"},
      {"^(a|aa)+$", long_a, long_a + "b"},
      {"^(a*)*b$", long_a + "b", long_a},
      {"(x+x+)+y", std::string(5'000, 'x') + "y", std::string(10'000, 'x')},
      {"^(\\w+\\s?)*$", "word word", long_a + " " + long_a + "!"},
      {"^([a-z]+[0-9]*)+\\.$", "ab1cd.", long_a + "1"},
      {"^(a|b)*$", std::string(100'000, 'a'), std::string(100'000, 'b') + "c"},
  };
  for (const auto& c : cases) {
    const Json schema = {{"type", "string"}, {"pattern", c.pattern}, {"enum", {c.matching, c.not_matching}}};
    auto grammar = within_bound(c.pattern.c_str(), [&] { return compile_json_schema(schema.dump(), {}); });
    ASSERT_TRUE(grammar.ok()) << c.pattern << ": " << grammar.error().message;
    EXPECT_TRUE(accepts(*grammar, Json(c.matching).dump())) << c.pattern;
    EXPECT_FALSE(accepts(*grammar, Json(c.not_matching).dump())) << c.pattern;
    // The same pattern on keys: the exploding key is no pattern key, so additionalProperties
    // decides it.
    const Json keys = {{"enum", {{{c.not_matching, 1}}, {{c.matching, "s"}}}},
                       {"patternProperties", {{c.pattern, {{"type", "string"}}}}},
                       {"additionalProperties", {{"type", "integer"}}}};
    auto by_key = within_bound(c.pattern.c_str(), [&] { return compile_json_schema(keys.dump(), {}); });
    ASSERT_TRUE(by_key.ok()) << c.pattern << ": " << by_key.error().message;
    EXPECT_TRUE(accepts(*by_key, Json{{c.not_matching, 1}}.dump())) << c.pattern;
    EXPECT_TRUE(accepts(*by_key, Json{{c.matching, "s"}}.dump())) << c.pattern;
  }
  // Only the values that match are generated; none left is an error, and a pattern the front
  // end cannot read stays an error naming it.
  const Json none = {{"type", "string"}, {"pattern", "^(a+)+$"}, {"enum", {std::string(45, 'a') + "b"}}};
  auto empty = within_bound("^(a+)+$ alone", [&] { return compile_json_schema(none.dump(), {}); });
  ASSERT_FALSE(empty.ok());
  EXPECT_NE(empty.error().message.find("leaves no value"), std::string::npos) << empty.error().message;
  auto lookahead = compile_json_schema(R"x({"pattern":"^(?=a)","enum":["a"]})x", {});
  ASSERT_FALSE(lookahead.ok());
  EXPECT_NE(lookahead.error().message.find("lookaround assertions are not supported"), std::string::npos)
      << lookahead.error().message;
}

}  // namespace
}  // namespace deepinfer::grammar
