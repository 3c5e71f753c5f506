// json_nesting_depth against nlohmann's own parse of the same texts: the depth of the parsed tree,
// with brackets inside strings (and escaped quotes) not counted.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>

#include "core/json_nesting.h"

namespace deepinfer {
namespace {

int64_t tree_depth(const nlohmann::json& j) {
  int64_t deepest = 0;
  if (j.is_array() || j.is_object()) {
    for (const auto& child : j) deepest = std::max(deepest, tree_depth(child));
    return deepest + 1;
  }
  return 0;
}

TEST(JsonNesting, EqualsTheParsedTreesDepth) {
  for (const std::string text :
       {R"(1)", R"("[[[")", R"([])", R"({"a":[1,{"b":"]]]"}]})", R"(["\"[", [[["x\\"]]]])", R"({"k":{"k":{}}})",
        R"([[1],[[2]],[[[3]]]])"}) {
    EXPECT_EQ(json_nesting_depth(text), tree_depth(nlohmann::json::parse(text))) << text;
  }
}

TEST(JsonNesting, CountsDeepDocumentsWithoutRecursion) {
  const std::string deep = std::string(1'000'000, '[') + std::string(1'000'000, ']');
  EXPECT_EQ(json_nesting_depth(deep), 1'000'000);
  EXPECT_GT(json_nesting_depth(deep), kMaxJsonNesting);
}

}  // namespace
}  // namespace deepinfer
