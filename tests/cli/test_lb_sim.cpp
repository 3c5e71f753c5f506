// `deepinfer lb-sim` end to end on a slice of the Mooncake trace in the repository: invariants
// every policy's figures must satisfy (no timing assertions), and clear errors for bad input.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "run_cli.h"
#include "temp_dir.h"

namespace {

using deepinfer::testing::run_cli;
using deepinfer::testing::TempDir;

const std::string kTrace = std::string(DEEPINFER_SOURCE_DIR) + "/bench/data/mooncake_conversation_head2000.jsonl";
const std::string kGoodLine = R"({"timestamp": 0, "input_length": 900, "output_length": 4, "hash_ids": [0, 1]})";

TEST(LbSimCli, EveryPolicyFinishesEveryRequestAndConservesTokens) {
  TempDir dir;
  const std::string json_path = dir.path("lb.json");
  const auto r = run_cli("lb-sim --trace " + kTrace +
                             " --requests 300 --prefill-instances 4 --decode-instances 2 --rate-scale 4"
                             " --policies seeds,round-robin,least-loaded,prefix-affinity,single --json " +
                             json_path,
                         false);
  ASSERT_EQ(r.exit_code, 0) << r.out;
  const nlohmann::json out = nlohmann::json::parse(std::ifstream(json_path));
  EXPECT_EQ(out["num_requests"], 300);
  ASSERT_EQ(out["results"].size(), 5u);
  double worst_balance = 2;
  std::string least_balanced;
  for (const nlohmann::json& result : out["results"]) {
    const std::string policy = result["policy"];
    EXPECT_NE(r.out.find("| " + policy + " |"), std::string::npos) << "the table lacks " << policy;
    EXPECT_EQ(result["num_finished"], 300) << policy;
    EXPECT_EQ(result["cached_tokens"].get<int64_t>() + result["computed_prefill_tokens"].get<int64_t>(),
              result["input_tokens"].get<int64_t>())
        << policy;
    EXPECT_EQ(result["generated_tokens"], result["output_tokens"]) << policy;
    EXPECT_LE(result["ttft_p50_ms"].get<double>(), result["ttft_p99_ms"].get<double>()) << policy;
    EXPECT_LE(result["tpot_p50_ms"].get<double>(), result["tpot_p99_ms"].get<double>()) << policy;
    EXPECT_GT(result["ttft_p50_ms"].get<double>(), 0) << policy;
    EXPECT_GE(result["prefix_hit_rate"].get<double>(), 0) << policy;
    EXPECT_LE(result["prefix_hit_rate"].get<double>(), 1) << policy;
    EXPECT_GT(result["balanced_fraction"].get<double>(), 0) << policy;
    EXPECT_LE(result["balanced_fraction"].get<double>(), 1 + 1e-9) << policy;
    EXPECT_GE(result["prefill_busy_max_over_mean"].get<double>(), 1 - 1e-9) << policy;
    if (result["balanced_fraction"].get<double>() < worst_balance) {
      worst_balance = result["balanced_fraction"].get<double>();
      least_balanced = policy;
    }
  }
  // Everything on one of four instances: the busiest holds all the work, 4x the mean, and it is
  // the least balanced of all.
  EXPECT_EQ(least_balanced, "single");
  EXPECT_NEAR(out["results"][4]["prefill_busy_max_over_mean"].get<double>(), 4, 1e-9);
}

TEST(LbSimCli, AMalformedTraceLineIsNamedByItsNumber) {
  TempDir dir;
  const std::string trace = dir.write("bad.jsonl", kGoodLine + "\n" + kGoodLine + "\n{\"timestamp\": 5}\n");
  const auto r = run_cli("lb-sim --trace " + trace);
  EXPECT_EQ(r.exit_code, 1);
  EXPECT_NE(r.out.find("bad.jsonl:3: no \"input_length\" field"), std::string::npos) << r.out;
}

TEST(LbSimCli, BadFlagsAreErrorsNamingTheFlag) {
  TempDir dir;
  const std::string trace = dir.write("one.jsonl", kGoodLine + "\n");
  const std::pair<std::string, std::string> cases[] = {
      {"--policies seeds,fastest", "unknown balancer policy 'fastest'"},
      {"--rate-scale 0", "--rate-scale must be positive"},
      {"--prefill-instances 0", "--prefill-instances must be at least 1"},
      {"--shared-store maybe", "--shared-store takes on or off"},
      {"--cost-model " + dir.write("cost.json", R"({"prefill_ms": 3})"), "unknown cost model field 'prefill_ms'"},
  };
  for (const auto& [flags, message] : cases) {
    const auto r = run_cli("lb-sim --trace " + trace + " " + flags);
    EXPECT_EQ(r.exit_code, 1) << flags;
    EXPECT_NE(r.out.find(message), std::string::npos) << flags << ": " << r.out;
  }
  const auto missing = run_cli("lb-sim --prefill-instances 2");
  EXPECT_NE(missing.exit_code, 0);
  EXPECT_NE(missing.out.find("--trace"), std::string::npos) << missing.out;
}

}  // namespace
