// The cost model against the H200 measurements it was fitted to, its budgeted chunk, and its
// JSON overrides.
#include <gtest/gtest.h>

#include <string>

#include "cluster/cost_model.h"
#include "temp_dir.h"

namespace deepinfer {
namespace {

TEST(CostModel, ReproducesTheTwoPrefillMeasurementsItSolves) {
  const CostModel model;
  // docs/bench/cuda_dense_2026-12-02.jsonl: 4096 tokens in 0.1181 s, 32768 in 1.6987 s.
  EXPECT_NEAR(model.prefill_ms(4096, 0), 118.1, 0.1);
  EXPECT_NEAR(model.prefill_ms(32768, 0), 1698.7, 0.5);
}

TEST(CostModel, DecodeStepsFollowTheMeasuredPointsWithinTheFitsResidual) {
  const CostModel model;
  // (batch, context, step_ms) from the same file; the least-squares plane misses by at most 20 %.
  const double points[][3] = {{1, 1024, 4.215}, {8, 1024, 5.505}, {64, 1024, 7.617},  {256, 1024, 17.337},
                              {1, 8192, 5.211}, {8, 8192, 8.230}, {64, 8192, 20.989}, {256, 8192, 70.077}};
  for (const auto& point : points) {
    const double predicted =
        model.decode_step_ms(static_cast<int64_t>(point[0]), static_cast<int64_t>(point[0] * point[1]));
    EXPECT_NEAR(predicted, point[2], 0.2 * point[2]) << "batch " << point[0] << " context " << point[1];
  }
}

TEST(CostModel, CachedTokensCostOnlyTheirAttention) {
  const CostModel model;
  // 1000 new tokens after 8000 cached: the linear part of 1000 tokens plus 1000 x (8000 + 500) pairs.
  const double expected = model.prefill_per_token_ms * 1000 + model.prefill_attention_per_token_pair_ms * 1000 * 8500;
  EXPECT_DOUBLE_EQ(model.prefill_tokens_ms(1000, 8000), expected);
  EXPECT_LT(model.prefill_ms(1000, 8000), model.prefill_ms(9000, 0));
}

TEST(CostModel, TheBudgetedChunkIsTheLargestThatFits) {
  const CostModel model;
  for (const int64_t prior : {0, 5000, 100000}) {
    for (const double budget : {1.0, 50.0, 200.0, 1000.0}) {
      const int64_t tokens = model.max_tokens_within(budget, prior);
      EXPECT_LE(model.prefill_tokens_ms(tokens, prior), budget);
      EXPECT_GT(model.prefill_tokens_ms(tokens + 1, prior), budget) << "prior " << prior << " budget " << budget;
    }
  }
  EXPECT_EQ(model.max_tokens_within(0, 0), 0);
  EXPECT_EQ(model.max_tokens_within(-5, 0), 0);
}

TEST(CostModel, AJsonFileReplacesTheFieldsItNames) {
  const testing::TempDir dir;
  auto model = CostModel::from_json_file(
      dir.write("cost.json", R"({"prefill_per_token_ms": 0.5, "decode_step_overhead_ms": 2})"));
  ASSERT_TRUE(model.ok()) << model.error().message;
  EXPECT_EQ(model->prefill_per_token_ms, 0.5);
  EXPECT_EQ(model->decode_step_overhead_ms, 2);
  EXPECT_EQ(model->decode_per_request_ms, CostModel{}.decode_per_request_ms);
}

TEST(CostModel, UnknownOrNonNumericFieldsAreErrorsNamingThem) {
  auto unknown = CostModel::from_json(nlohmann::json{{"prefil_per_token_ms", 1}});
  ASSERT_FALSE(unknown.ok());
  EXPECT_NE(unknown.error().message.find("prefil_per_token_ms"), std::string::npos);
  auto text = CostModel::from_json(nlohmann::json{{"decode_per_request_ms", "fast"}});
  ASSERT_FALSE(text.ok());
  EXPECT_NE(text.error().message.find("decode_per_request_ms"), std::string::npos);
  EXPECT_FALSE(CostModel::from_json(nlohmann::json::array()).ok());
  EXPECT_FALSE(CostModel::from_json_file("/nonexistent/cost.json").ok());
}

}  // namespace
}  // namespace deepinfer
