// ExpertPlacement: the contiguous start, what validate() rejects, and the JSON file form.
#include "parallel/expert_placement.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace deepinfer {
namespace {

::testing::AssertionResult fails_with(const Result<void>& result, const std::string& words) {
  if (result.ok()) return ::testing::AssertionFailure() << "expected an error naming '" << words << "'";
  if (result.error().message.find(words) == std::string::npos) {
    return ::testing::AssertionFailure() << "error '" << result.error().message << "' does not name '" << words << "'";
  }
  return ::testing::AssertionSuccess();
}

template <typename T>
Result<void> as_void(const Result<T>& result) {
  if (!result.ok()) return result.error();
  return {};
}

TEST(ExpertPlacement, ContiguousPlacesExpertsInOrderThenCopiesOfTheFirst) {
  auto placement = ExpertPlacement::contiguous(8, 2, 2);
  ASSERT_TRUE(placement.ok()) << placement.error().message;
  EXPECT_EQ(placement->num_logical_experts, 8);
  EXPECT_EQ(placement->num_ranks, 2);
  EXPECT_EQ(placement->slots_per_rank, 5);
  EXPECT_EQ(placement->num_physical(), 10);
  EXPECT_EQ(placement->num_redundant(), 2);
  EXPECT_EQ(placement->physical_to_logical, (std::vector<int32_t>{0, 1, 2, 3, 4, 5, 6, 7, 0, 1}));
  EXPECT_EQ(placement->rank_of(4), 0);
  EXPECT_EQ(placement->rank_of(5), 1);
  EXPECT_EQ(placement->rank_of(9), 1);
  const std::vector<std::vector<int32_t>> replicas = placement->replicas();
  ASSERT_EQ(replicas.size(), 8U);
  EXPECT_EQ(replicas[0], (std::vector<int32_t>{0, 8}));
  EXPECT_EQ(replicas[1], (std::vector<int32_t>{1, 9}));
  EXPECT_EQ(replicas[7], (std::vector<int32_t>{7}));
  EXPECT_EQ(placement->replica_counts(), (std::vector<int32_t>{2, 2, 1, 1, 1, 1, 1, 1}));
  EXPECT_TRUE(placement->validate().ok());
}

TEST(ExpertPlacement, ContiguousWithoutRedundantExpertsIsTheIdentity) {
  auto placement = ExpertPlacement::contiguous(256, 64, 0);
  ASSERT_TRUE(placement.ok());
  EXPECT_EQ(placement->slots_per_rank, 4);
  for (int32_t p = 0; p < 256; ++p) EXPECT_EQ(placement->physical_to_logical[p], p);
}

TEST(ExpertPlacement, ContiguousRejectsSlotsThatDoNotSplitOverTheRanks) {
  EXPECT_TRUE(fails_with(as_void(ExpertPlacement::contiguous(8, 3, 0)), "do not split evenly over 3 ranks"));
  EXPECT_TRUE(fails_with(as_void(ExpertPlacement::contiguous(256, 64, 1)), "multiple of the ranks"));
  EXPECT_TRUE(fails_with(as_void(ExpertPlacement::contiguous(0, 1, 0)), "num_logical > 0"));
  EXPECT_TRUE(fails_with(as_void(ExpertPlacement::contiguous(8, 0, 0)), "num_ranks > 0"));
  EXPECT_TRUE(fails_with(as_void(ExpertPlacement::contiguous(8, 2, -2)), "num_redundant >= 0"));
}

TEST(ExpertPlacement, ValidateNamesWhatIsWrong) {
  ExpertPlacement placement = *ExpertPlacement::contiguous(4, 2, 0);
  EXPECT_TRUE(placement.validate().ok());

  ExpertPlacement wrong_size = placement;
  wrong_size.physical_to_logical.push_back(0);
  EXPECT_TRUE(fails_with(wrong_size.validate(), "physical_to_logical has 5 slots but num_ranks * slots_per_rank"));

  ExpertPlacement out_of_range = placement;
  out_of_range.physical_to_logical[3] = 4;
  EXPECT_TRUE(fails_with(out_of_range.validate(), "slot 3 holds expert 4, outside [0, 4)"));
  out_of_range.physical_to_logical[3] = -1;
  EXPECT_TRUE(fails_with(out_of_range.validate(), "slot 3 holds expert -1"));

  ExpertPlacement missing = placement;
  missing.physical_to_logical = {0, 1, 1, 3};
  EXPECT_TRUE(fails_with(missing.validate(), "logical expert 2 has no slot"));

  ExpertPlacement no_ranks = placement;
  no_ranks.num_ranks = 0;
  EXPECT_TRUE(fails_with(no_ranks.validate(), "num_ranks must be positive"));
  ExpertPlacement no_slots = placement;
  no_slots.slots_per_rank = 0;
  EXPECT_TRUE(fails_with(no_slots.validate(), "slots_per_rank must be positive"));
  ExpertPlacement no_experts = placement;
  no_experts.num_logical_experts = 0;
  EXPECT_TRUE(fails_with(no_experts.validate(), "num_logical_experts must be positive"));
}

TEST(ExpertPlacementJson, RoundTripsEveryLayer) {
  ExpertPlacement first = *ExpertPlacement::contiguous(8, 2, 2);
  ExpertPlacement second = *ExpertPlacement::contiguous(8, 4, 0);
  second.physical_to_logical = {7, 6, 5, 4, 3, 2, 1, 0};
  const std::vector<ExpertPlacement> placements = {first, second};
  auto parsed = placements_from_json(placements_to_json(placements));
  ASSERT_TRUE(parsed.ok()) << parsed.error().message;
  EXPECT_EQ(*parsed, placements);

  const std::string path = (std::filesystem::temp_directory_path() / "deepinfer_test_placement.json").string();
  ASSERT_TRUE(save_placements(path, placements).ok());
  auto loaded = load_placements(path);
  ASSERT_TRUE(loaded.ok()) << loaded.error().message;
  EXPECT_EQ(*loaded, placements);
  std::remove(path.c_str());
}

TEST(ExpertPlacementJson, RejectsFilesThatAreNotPlacements) {
  EXPECT_TRUE(fails_with(as_void(placements_from_json("{not json")), "not valid JSON"));
  EXPECT_TRUE(fails_with(as_void(placements_from_json("[1, 2]")), "\"format\": \"deepinfer-expert-placement\""));
  EXPECT_TRUE(fails_with(as_void(placements_from_json(R"({"format": 3})")), "\"format\""));
  EXPECT_TRUE(fails_with(as_void(placements_from_json(R"({"format": "deepinfer-expert-placement", "version": 2})")),
                         "unsupported version"));
  EXPECT_TRUE(fails_with(as_void(placements_from_json(R"({"format": "deepinfer-expert-placement", "version": 1})")),
                         "\"moe_layers\" array"));
  const std::string missing_field = R"({"format": "deepinfer-expert-placement", "version": 1, "moe_layers": [
      {"num_logical_experts": 2, "num_ranks": 1, "slots_per_rank": 2, "physical_to_logical": [0, 1]},
      {"num_logical_experts": 2, "slots_per_rank": 2, "physical_to_logical": [0, 1]}]})";
  EXPECT_TRUE(fails_with(as_void(placements_from_json(missing_field)),
                         "moe_layers[1] needs a non-negative integer \"num_ranks\""));
  const std::string bad_slot = R"({"format": "deepinfer-expert-placement", "version": 1, "moe_layers": [
      {"num_logical_experts": 2, "num_ranks": 1, "slots_per_rank": 2, "physical_to_logical": [0, 0]}]})";
  EXPECT_TRUE(fails_with(as_void(placements_from_json(bad_slot)),
                         "moe_layers[0]: expert placement: logical expert 1 has no slot"));
  const std::string not_ids = R"({"format": "deepinfer-expert-placement", "version": 1, "moe_layers": [
      {"num_logical_experts": 2, "num_ranks": 1, "slots_per_rank": 2, "physical_to_logical": [0, "1"]}]})";
  EXPECT_TRUE(fails_with(as_void(placements_from_json(not_ids)), "not an expert id"));
  EXPECT_TRUE(fails_with(as_void(load_placements("/nonexistent/placement.json")), "/nonexistent/placement.json"));
}

}  // namespace
}  // namespace deepinfer
