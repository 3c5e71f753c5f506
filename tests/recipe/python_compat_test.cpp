// python_json / python_trim and friends against values printed by CPython 3.11 (json.dumps with
// ensure_ascii=False, repr(float), str.strip()), written down here.
#include "recipe/python_compat.h"

#include <gtest/gtest.h>

namespace deepinfer {
namespace {

using Json = nlohmann::ordered_json;

TEST(PythonJson, FloatsLikePythonRepr) {
  // repr() of each value in CPython.
  const std::pair<double, const char*> cases[] = {
      {1.0, "1.0"},
      {0.5, "0.5"},
      {-2.25, "-2.25"},
      {1e-05, "1e-05"},
      {1.5e-07, "1.5e-07"},
      {0.0001, "0.0001"},
      {123456.0, "123456.0"},
      {1e16, "1e+16"},
      {1.5e16, "1.5e+16"},
      {1e15, "1000000000000000.0"},
      {0.1, "0.1"},
      {-0.0, "-0.0"},
      {3.141592653589793, "3.141592653589793"},
      {1.7976931348623157e308, "1.7976931348623157e+308"},
      {5e-324, "5e-324"},
      {123.456e-10, "1.23456e-08"},
  };
  for (const auto& [value, expected] : cases) EXPECT_EQ(python_json(Json(value)), expected) << expected;
}

TEST(PythonJson, DefaultSeparatorsKeyOrderAndUnicode) {
  const Json value = Json::parse(R"({"z": 1, "a": [true, null, "é\"\\\n\t\u0001", {}], "m": {"k": []}})");
  EXPECT_EQ(python_json(value), "{\"z\": 1, \"a\": [true, null, \"é\\\"\\\\\\n\\t\\u0001\", {}], \"m\": {\"k\": []}}");
}

TEST(PythonJson, IndentedLikeJsonDumpsIndent4) {
  const Json value = Json::parse(R"({"a": [1, 2], "b": {}, "c": {"d": "x"}})");
  EXPECT_EQ(
      python_json(value, 4),
      "{\n    \"a\": [\n        1,\n        2\n    ],\n    \"b\": {},\n    \"c\": {\n        \"d\": \"x\"\n    }\n}");
}

TEST(PythonStr, ScalarsAsJinjaConcatenationSeesThem) {
  EXPECT_EQ(python_str(Json("raw \"text\"")), "raw \"text\"");
  EXPECT_EQ(python_str(Json(true)), "True");
  EXPECT_EQ(python_str(Json(nullptr)), "None");
  EXPECT_EQ(python_str(Json(7)), "7");
}

TEST(PythonTruthy, EmptyAndZeroAreFalse) {
  for (const char* falsy : {"null", "false", "0", "0.0", "\"\"", "[]", "{}"})
    EXPECT_FALSE(python_truthy(Json::parse(falsy))) << falsy;
  for (const char* truthy : {"true", "1", "-1", "0.5", "\" \"", "[0]", "{\"a\": null}"}) {
    EXPECT_TRUE(python_truthy(Json::parse(truthy))) << truthy;
  }
}

TEST(PythonStrip, CharsAndUnicodeWhitespace) {
  EXPECT_EQ(strip_chars("\n\nab\n\n", "\n"), "ab");
  EXPECT_EQ(lstrip_chars("\n\n", "\n"), "");
  EXPECT_EQ(rstrip_chars("a\n \n", "\n"), "a\n ");
  // str.strip() removes U+3000, U+00A0, U+2028 and the ASCII separators \x1c-\x1f, not U+FEFF.
  EXPECT_EQ(python_trim("\u3000\u00a0 \t\x1c hi there \u2028\n"), "hi there");
  EXPECT_EQ(python_trim("\ufeffx"), "\ufeffx");
  EXPECT_EQ(python_trim(" \n "), "");
  EXPECT_EQ(python_len("a\u00e9\u732b\U0001F600"), 4u);
}

}  // namespace
}  // namespace deepinfer
