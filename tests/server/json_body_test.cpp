// parse_json_body, the one entry of every JSON route: a body nested past kMaxJsonNesting is a 400
// naming the depth, before anything recursive touches it (copying or dumping a million-deep array
// ran out of stack); brackets inside strings do not count, so deep text in a prompt is accepted.
#include <gtest/gtest.h>

#include <string>
#include <variant>

#include "core/json_nesting.h"
#include "server/server_context.h"

namespace deepinfer::server {
namespace {

TEST(JsonBody, DeeplyNestedBodyIsA400NamingTheDepth) {
  const std::string deep = std::string(100'000, '[') + std::string(100'000, ']');
  const auto parsed = parse_json_body(ApiKind::kChatCompletions, R"({"model":"m","messages":)" + deep + "}");
  ASSERT_TRUE(std::holds_alternative<ApiError>(parsed));
  const auto& error = std::get<ApiError>(parsed);
  EXPECT_EQ(error.status, 400);
  EXPECT_NE(error.message.find("100001 deep"), std::string::npos) << error.message;
  EXPECT_NE(error.message.find(std::to_string(kMaxJsonNesting)), std::string::npos) << error.message;
}

TEST(JsonBody, BracketsInsideStringsAreText) {
  const std::string body = R"({"model":"m","prompt":")" + std::string(100'000, '[') + R"("})";
  const auto parsed = parse_json_body(ApiKind::kCompletions, body);
  ASSERT_TRUE(std::holds_alternative<nlohmann::ordered_json>(parsed));
  EXPECT_EQ(std::get<nlohmann::ordered_json>(parsed)["prompt"].get<std::string>().size(), 100'000u);
}

}  // namespace
}  // namespace deepinfer::server
