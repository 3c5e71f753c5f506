// Expert parallelism through the CLI, ranks as processes over Gloo. Oracle: the one-rank engine,
// itself checked against the transformers fixtures (tests/model). Every MoE fixture scored with
// its experts spread over 2 and 4 ranks, with and without redundant copies, gives the one-rank
// logits bit for bit in batch-invariant mode; a batch dealt to 2 or 4 ranks that run their forwards
// together gives the one-rank tokens and logprobs (so does data parallelism without expert
// parallelism, independent copies); bad flags are named; a rank that fails ends the others with an
// error naming the group, not a hang.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "run_cli.h"

namespace {

using deepinfer::testing::run_cli;
using deepinfer::testing::run_shell;

std::string fixture(const std::string& name) { return std::string(DEEPINFER_TEST_DATA_DIR) + "/" + name; }

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

class TempDir {
 public:
  TempDir() : path_(std::filesystem::temp_directory_path() / ("deepinfer-ep-" + std::to_string(::getpid()))) {
    std::filesystem::create_directories(path_);
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  std::string file(const std::string& name) const { return (path_ / name).string(); }

 private:
  std::filesystem::path path_;
};

const char* const kMoeFixtures[] = {"deepseek_v2", "deepseek_v3", "qwen3_moe", "mixtral", "gpt_oss"};

TEST(ExpertParallelCli, ScoreUnderExpertParallelismGivesTheOneRankBits) {
  TempDir dir;
  const std::string tokens = "--tokens 1,5,9,22,7,3,100,42,17,250,64,2 --batch-invariant --threads 1";
  for (const char* name : kMoeFixtures) {
    const std::string model = "--model " + fixture(name) + " " + tokens;
    const auto one = run_cli("score " + model + " --dump-logits " + dir.file("one.f32"), false);
    ASSERT_EQ(one.exit_code, 0) << name;
    for (const std::string parallel : {"--data-parallel-size 2 --expert-parallel",
                                       "--data-parallel-size 4 --expert-parallel --num-redundant-experts 4"}) {
      const auto many = run_cli("score " + model + " " + parallel + " --dump-logits " + dir.file("many.f32"), false);
      ASSERT_EQ(many.exit_code, 0) << name << " " << parallel << ": " << run_cli("score " + model + " " + parallel).out;
      EXPECT_EQ(many.out, one.out) << name << " " << parallel;
      EXPECT_EQ(read_file(dir.file("many.f32")), read_file(dir.file("one.f32"))) << name << " " << parallel;
    }
  }
}

TEST(ExpertParallelCli, APlacementFileWithCopiesOfHotExpertsChangesNoBits) {
  TempDir dir;
  {
    // qwen3_moe: 8 experts in each of its 2 MoE layers; 2 ranks x 5 slots, experts 7 and 3 twice.
    std::ofstream placement(dir.file("placement.json"));
    placement << R"({"format": "deepinfer-expert-placement", "version": 1, "moe_layers": [)"
              << R"({"num_logical_experts": 8, "num_ranks": 2, "slots_per_rank": 5,)"
              << R"( "physical_to_logical": [7, 6, 5, 4, 3, 2, 1, 0, 7, 3]},)"
              << R"({"num_logical_experts": 8, "num_ranks": 2, "slots_per_rank": 5,)"
              << R"( "physical_to_logical": [0, 2, 4, 6, 1, 3, 5, 7, 0, 1]}]})";
  }
  const std::string model = "score --model " + fixture("qwen3_moe") +
                            " --tokens 1,5,9,22,7,3,100,42,17,250,64,2 --batch-invariant --threads 1";
  const auto one = run_cli(model, false);
  ASSERT_EQ(one.exit_code, 0);
  const std::string placed_flags =
      " --data-parallel-size 2 --expert-parallel --expert-placement " + dir.file("placement.json");
  const auto placed = run_cli(model + placed_flags, false);
  ASSERT_EQ(placed.exit_code, 0) << run_cli(model + placed_flags).out;
  EXPECT_EQ(placed.out, one.out);
  const auto wrong =
      run_cli(model + " --data-parallel-size 4 --expert-parallel --expert-placement " + dir.file("placement.json"));
  EXPECT_EQ(wrong.exit_code, 1);
  EXPECT_NE(wrong.out.find("is for 8 experts on 2 ranks"), std::string::npos) << wrong.out;
}

TEST(ExpertParallelCli, BatchesDealtToRanksGiveTheOneRankOutputs) {
  TempDir dir;
  {
    std::ofstream input(dir.file("in.jsonl"));
    const char* const prompts[] = {"def fibonacci(n):", "import os",     "class Stack:", "for i in range(10):",
                                   "# sort a list",     "x = [1, 2, 3]", "while True:"};
    int i = 0;
    for (const char* prompt : prompts) {
      input << R"({"prompt": ")" << prompt << R"(", "max_tokens": )" << 6 + i % 3
            << R"(, "logprobs": true, "top_logprobs": 2, "temperature": )" << (i % 2 == 0 ? "0" : "0.8")
            << R"(, "seed": )" << i << "}\n";
      ++i;
    }
  }
  const std::string base = "generate --model " + std::string(DEEPINFER_SOURCE_DIR) + "/models/default --input " +
                           dir.file("in.jsonl") + " --batch-invariant --threads 1 --output ";
  ASSERT_EQ(run_cli(base + dir.file("one.jsonl")).exit_code, 0);
  const std::string want = read_file(dir.file("one.jsonl"));
  ASSERT_NE(want.find("\"token_ids\""), std::string::npos);
  for (const std::string parallel :
       {"--data-parallel-size 2 --expert-parallel",
        "--data-parallel-size 4 --expert-parallel --num-redundant-experts 4", "--data-parallel-size 2"}) {
    const auto run = run_cli(base + dir.file("many.jsonl") + " " + parallel);
    ASSERT_EQ(run.exit_code, 0) << parallel << ": " << run.out;
    EXPECT_EQ(read_file(dir.file("many.jsonl")), want) << parallel;
  }
}

TEST(ExpertParallelCli, BadFlagsAreNamed) {
  const std::string model = "score --model " + fixture("qwen3_moe") + " --tokens 1,2,3 ";
  const auto redundant = run_cli(model + "--data-parallel-size 3 --expert-parallel --num-redundant-experts 2");
  EXPECT_EQ(redundant.exit_code, 1);
  EXPECT_NE(redundant.out.find("multiple of"), std::string::npos) << redundant.out;
  const auto no_ep = run_cli(model + "--num-redundant-experts 2");
  EXPECT_EQ(no_ep.exit_code, 1);
  EXPECT_NE(no_ep.out.find("need --expert-parallel"), std::string::npos) << no_ep.out;
  const auto rank = run_cli(model + "--data-parallel-size 2 --data-parallel-rank 2 --data-parallel-address /tmp/x");
  EXPECT_EQ(rank.exit_code, 1);
  EXPECT_NE(rank.out.find("outside 0..1"), std::string::npos) << rank.out;
  const auto dense = run_cli("score --model " + fixture("qwen3") +
                             " --tokens 1,2,3 --data-parallel-size 2 "
                             "--expert-parallel");
  EXPECT_EQ(dense.exit_code, 1);
  EXPECT_NE(dense.out.find("has no MoE layers"), std::string::npos) << dense.out;
}

TEST(ExpertParallelCli, ARankThatFailsEndsTheOthersWithAnError) {
  TempDir dir;
  const std::string cli = DEEPINFER_CLI;
  const std::string score = " score --model " + fixture("qwen3_moe") +
                            " --tokens 1,2,3,4 --data-parallel-size 2 --expert-parallel --data-parallel-address " +
                            dir.file("rendezvous") + " --data-parallel-rank ";
  // Rank 1's first expert product throws; rank 0 must notice the group is gone and end, naming it.
  const auto rank0 = run_shell("(DEEPINFER_FAULT=throw:moe_experts:1 " + cli + score +
                               "1 >/dev/null 2>&1 &); timeout 60 " + cli + score + "0 2>&1");
  EXPECT_EQ(rank0.exit_code, 1) << rank0.out;
  EXPECT_NE(rank0.out.find("data-parallel group 'deepinfer'"), std::string::npos) << rank0.out;
}

}  // namespace
