// Expert parallelism through the CLI, ranks as processes over Gloo. Oracle: the one-rank engine,
// itself checked against the transformers fixtures (tests/model). Every MoE fixture scored with
// its experts spread over 2 and 4 ranks, with and without redundant copies, with the exchange
// planned on the device (fixed-size blocks) or on the host, gives the one-rank logits bit for bit
// in batch-invariant mode; a batch dealt to 2 or 4 ranks that run their forwards
// together gives the one-rank tokens and logprobs (so does data parallelism without expert
// parallelism, independent copies); bf16 and FP8 payloads stay within their rounding of the one-rank
// logits; bad flags are named; a rank that fails ends the others with an
// error naming the group, not a hang; re-placing the experts while generating (EPLB) changes no
// output.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "parallel/expert_placement.h"
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

// Writes a generate --input file of the given prompts (greedy and seeded sampling in turn, with
// logprobs) and returns the command that runs it on the default model, batch invariant, up to
// the --output path.
std::string default_model_batch(const TempDir& dir, const std::vector<std::string>& prompts, int max_tokens) {
  std::ofstream input(dir.file("in.jsonl"));
  int i = 0;
  for (const std::string& prompt : prompts) {
    input << R"({"prompt": ")" << prompt << R"(", "max_tokens": )" << max_tokens + i % 3
          << R"(, "logprobs": true, "top_logprobs": 2, "temperature": )" << (i % 2 == 0 ? "0" : "0.8")
          << R"(, "seed": )" << i << "}\n";
    ++i;
  }
  return "generate --model " + std::string(DEEPINFER_SOURCE_DIR) + "/models/default --input " + dir.file("in.jsonl") +
         " --batch-invariant --threads 1 --output ";
}

const char* const kMoeFixtures[] = {"deepseek_v2", "deepseek_v3", "qwen3_moe", "mixtral", "gpt_oss"};

TEST(ExpertParallelCli, ScoreUnderExpertParallelismGivesTheOneRankBits) {
  TempDir dir;
  const std::string tokens = "--tokens 1,5,9,22,7,3,100,42,17,250,64,2 --batch-invariant --threads 1";
  for (const char* name : kMoeFixtures) {
    const std::string model = "--model " + fixture(name) + " " + tokens;
    const auto one = run_cli("score " + model + " --dump-logits " + dir.file("one.f32"), false);
    ASSERT_EQ(one.exit_code, 0) << name;
    // The first two plan every round's exchange on the device (fixed-size blocks, the default for
    // rounds of up to 256 tokens); the third sends the counts first and only the routed rows.
    for (const std::string parallel : {"--data-parallel-size 2 --expert-parallel",
                                       "--data-parallel-size 4 --expert-parallel --num-redundant-experts 4",
                                       "--data-parallel-size 4 --expert-parallel --num-redundant-experts 4 "
                                       "--expert-parallel-fixed-tokens 0"}) {
      const auto many = run_cli("score " + model + " " + parallel + " --dump-logits " + dir.file("many.f32"), false);
      ASSERT_EQ(many.exit_code, 0) << name << " " << parallel << ": " << run_cli("score " + model + " " + parallel).out;
      EXPECT_EQ(many.out, one.out) << name << " " << parallel;
      EXPECT_EQ(read_file(dir.file("many.f32")), read_file(dir.file("one.f32"))) << name << " " << parallel;
    }
  }
}

std::vector<float> read_floats(const std::string& path) {
  const std::string bytes = read_file(path);
  std::vector<float> values(bytes.size() / sizeof(float));
  std::memcpy(values.data(), bytes.data(), values.size() * sizeof(float));
  return values;
}

// bf16 and FP8 payloads round the rows on their way to the experts and back, so the logits move
// from the one-rank run's, but only by about that rounding; float32 named explicitly keeps the bits.
TEST(ExpertParallelCli, Bf16AndFp8PayloadsStayNearTheOneRankLogits) {
  TempDir dir;
  const std::string tokens = "--tokens 1,5,9,22,7,3,100,42,17,250,64,2 --batch-invariant --threads 1";
  const std::string parallel = " --data-parallel-size 2 --expert-parallel --expert-parallel-payload ";
  for (const char* name : kMoeFixtures) {
    const std::string model = "score --model " + fixture(name) + " " + tokens;
    ASSERT_EQ(run_cli(model + " --dump-logits " + dir.file("one.f32"), false).exit_code, 0) << name;
    const std::vector<float> one = read_floats(dir.file("one.f32"));
    ASSERT_FALSE(one.empty()) << name;
    // Measured on the CPU: bf16 moved them by at most 0.0033, fp8 by 0.071 (gpt_oss); bounds ~3x that.
    const std::pair<const char*, float> payloads[] = {{"float32", 0.0f}, {"bf16", 0.01f}, {"fp8", 0.2f}};
    float previous = -1.0f;
    for (const auto& [payload, bound] : payloads) {
      std::filesystem::remove(dir.file("many.f32"));
      const auto run = run_cli(model + parallel + payload + " --dump-logits " + dir.file("many.f32"));
      ASSERT_EQ(run.exit_code, 0) << name << " " << payload << ": " << run.out;
      const std::vector<float> many = read_floats(dir.file("many.f32"));
      ASSERT_EQ(many.size(), one.size()) << name << " " << payload;
      float diff = 0.0f;
      for (size_t i = 0; i < one.size(); ++i) diff = std::max(diff, std::fabs(many[i] - one[i]));
      std::cout << name << " " << payload << ": max |logit - one rank's| " << diff << "\n";
      EXPECT_LE(diff, bound) << name << " " << payload;
      // Each payload rounds more than the one before it (e4m3 keeps 3 mantissa bits, bf16 7).
      EXPECT_GT(diff, previous) << name << " " << payload << ": the rows were not rounded as " << payload;
      previous = diff;
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
  const std::string base =
      default_model_batch(dir,
                          {"def fibonacci(n):", "import os", "class Stack:", "for i in range(10):", "# sort a list",
                           "x = [1, 2, 3]", "while True:"},
                          6);
  ASSERT_EQ(run_cli(base + dir.file("one.jsonl")).exit_code, 0);
  const std::string want = read_file(dir.file("one.jsonl"));
  ASSERT_NE(want.find("\"token_ids\""), std::string::npos);
  for (const std::string parallel :
       {"--data-parallel-size 2 --expert-parallel",
        "--data-parallel-size 4 --expert-parallel --num-redundant-experts 4",
        "--data-parallel-size 2 --expert-parallel --expert-parallel-fixed-tokens 4", "--data-parallel-size 2"}) {
    const auto run = run_cli(base + dir.file("many.jsonl") + " " + parallel);
    ASSERT_EQ(run.exit_code, 0) << parallel << ": " << run.out;
    EXPECT_EQ(read_file(dir.file("many.jsonl")), want) << parallel;
  }
}

// Speculative decoding under expert parallelism: each rank drafts with the MTP module and verifies
// with the decoder, and the group's rounds run one kind of forward at a time (a rank drafting
// while another verifies joins the other's round without tokens, then votes again). Greedy
// speculative decoding gives the greedy tokens, so the oracle is one rank without drafts.
TEST(ExpertParallelCli, SpeculativeDecodingUnderExpertParallelismGivesTheGreedyTokens) {
  TempDir dir;
  {
    std::ofstream input(dir.file("in.jsonl"));
    int i = 0;
    // The first prompt is long: with one sequence at a time its rank prefills while the other
    // drafts, so rounds of both kinds are asked for at once.
    const std::string long_prompt = "# " + std::string(200, 'a');
    for (const std::string& prompt : {long_prompt, std::string("import os"), std::string("class Stack:"),
                                      std::string("for i in range(10):"), std::string("x = [1, 2]")}) {
      input << R"({"prompt": ")" << prompt << R"(", "max_tokens": )" << 6 + 3 * (i++ % 3) << R"(, "temperature": 0})"
            << "\n";
    }
  }
  const std::string base = "generate --model " + std::string(DEEPINFER_SOURCE_DIR) + "/models/default --input " +
                           dir.file("in.jsonl") + " --batch-invariant --threads 1 --output ";
  ASSERT_EQ(run_cli(base + dir.file("greedy.jsonl")).exit_code, 0);
  const auto token_ids = [](const std::string& jsonl) {
    std::vector<std::string> ids;
    for (size_t at = jsonl.find("\"token_ids\""); at != std::string::npos; at = jsonl.find("\"token_ids\"", at + 1)) {
      ids.push_back(jsonl.substr(at, jsonl.find(']', at) - at));
    }
    return ids;
  };
  const auto want = token_ids(read_file(dir.file("greedy.jsonl")));
  ASSERT_EQ(want.size(), 5u);
  // Fixed-length verification: the confidence-scheduled budget follows measured step times, which
  // the deterministic mode rules out.
  for (const std::string parallel :
       {"--data-parallel-size 2 --expert-parallel --speculative-tokens 2 --spec-varlen off --max-num-seqs 1",
        "--data-parallel-size 4 --expert-parallel --num-redundant-experts 4 --speculative-tokens 3 --spec-varlen off"}) {
    const auto run = run_cli(base + dir.file("spec.jsonl") + " " + parallel);
    ASSERT_EQ(run.exit_code, 0) << parallel << ": " << run.out;
    EXPECT_EQ(token_ids(read_file(dir.file("spec.jsonl"))), want) << parallel;
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
  const auto transport = run_cli(model + "--data-parallel-size 2 --expert-parallel --expert-parallel-transport gloo");
  EXPECT_EQ(transport.exit_code, 1);
  EXPECT_NE(transport.out.find("--expert-parallel-transport: unknown expert-parallel transport 'gloo'"),
            std::string::npos)
      << transport.out;
  const auto payload = run_cli(model + "--data-parallel-size 2 --expert-parallel --expert-parallel-payload fp16");
  EXPECT_EQ(payload.exit_code, 1);
  EXPECT_NE(payload.out.find("--expert-parallel-payload: unknown expert-parallel payload 'fp16' (expected auto, "
                             "float32, bf16 or fp8)"),
            std::string::npos)
      << payload.out;
  const auto fixed_tokens =
      run_cli(model + "--data-parallel-size 2 --expert-parallel --expert-parallel-fixed-tokens -1");
  EXPECT_EQ(fixed_tokens.exit_code, 1);
  EXPECT_NE(fixed_tokens.out.find("--expert-parallel-fixed-tokens must be in [0, 65536]"), std::string::npos)
      << fixed_tokens.out;
  const auto transport_alone = run_cli(model + "--data-parallel-size 2 --expert-parallel-transport host");
  EXPECT_EQ(transport_alone.exit_code, 1);
  EXPECT_NE(transport_alone.out.find("need --expert-parallel"), std::string::npos) << transport_alone.out;
  // The launcher looks for GPUs to hand the started ranks; with none (or a build without CUDA)
  // every rank ends with the device's error instead of hanging.
  const auto no_gpu = run_cli(model + "--data-parallel-size 2 --expert-parallel --device cuda");
  EXPECT_EQ(no_gpu.exit_code, 1);
  EXPECT_TRUE(no_gpu.out.find("no usable CUDA device") != std::string::npos ||
              no_gpu.out.find("unknown device 'cuda'") != std::string::npos)
      << no_gpu.out;
  // Both ranks reach the exchange's choice and refuse it alike.
  const auto nccl_on_cpu = run_cli(model + "--data-parallel-size 2 --expert-parallel --expert-parallel-transport nccl");
  EXPECT_EQ(nccl_on_cpu.exit_code, 1);
  EXPECT_NE(nccl_on_cpu.out.find("expert-parallel transport nccl: rank 0: NCCL needs --device cuda"), std::string::npos)
      << nccl_on_cpu.out;
}

// The command line of one of two expert-parallel ranks started by hand (qwen3_moe, rendezvous in
// dir), up to its rank number.
std::string hand_started_rank(const TempDir& dir) {
  return std::string(DEEPINFER_CLI) + " score --model " + fixture("qwen3_moe") +
         " --tokens 1,2,3,4 --data-parallel-size 2 --expert-parallel --data-parallel-address " +
         dir.file("rendezvous") + " --data-parallel-rank ";
}

TEST(ExpertParallelCli, ARankThatFailsEndsTheOthersWithAnError) {
  TempDir dir;
  const std::string score = hand_started_rank(dir);
  // Rank 1's first expert product throws; rank 0 must notice the group is gone and end, naming it.
  const auto rank0 = run_shell("(DEEPINFER_FAULT=throw:moe_experts:1 " + score + "1 >/dev/null 2>&1 &); timeout 60 " +
                               score + "0 2>&1");
  EXPECT_EQ(rank0.exit_code, 1) << rank0.out;
  EXPECT_NE(rank0.out.find("data-parallel group 'deepinfer'"), std::string::npos) << rank0.out;
}

// Ranks started by hand settle "auto" on their own --batch-invariant: ranks that would send rows of
// different sizes, or fixed-size blocks in different rounds, stop at load with the same error,
// instead of exchanging garbage or hanging.
TEST(ExpertParallelCli, RanksThatDisagreeOnThePayloadStopAtLoad) {
  TempDir dir;
  const std::string score = hand_started_rank(dir);
  const std::pair<std::string, std::string> disagreements[] = {
      {"--batch-invariant", "expert-parallel payload: rank 0 sends float32 rows, rank 1 bf16 rows"},
      {"--expert-parallel-fixed-tokens 8",
       "expert-parallel fixed-size blocks: rank 0 sends them in rounds of up to 8 tokens, rank 1 up to 256"}};
  for (const auto& [flag, want] : disagreements) {
    std::filesystem::remove_all(dir.file("rendezvous"));  // a fresh group: the last one's keys stay there
    const auto rank0 = run_shell("timeout 60 " + score + "1 > " + dir.file("rank1.txt") + " 2>&1 & rank1=$!; " +
                                 "timeout 60 " + score + "0 " + flag + " 2>&1; rc=$?; wait $rank1; exit $rc");
    EXPECT_EQ(rank0.exit_code, 1) << rank0.out;
    EXPECT_NE(rank0.out.find(want), std::string::npos) << rank0.out;
    EXPECT_NE(read_file(dir.file("rank1.txt")).find(want), std::string::npos) << read_file(dir.file("rank1.txt"));
  }
}

// EPLB while running: re-placing the experts between forward rounds changes no output. Oracle: one
// rank's outputs (above, equal to the fixtures'). The re-placements are seen in the log and in the
// placement file rank 0 writes, which must differ from the contiguous start and load again.
TEST(ExpertParallelCli, RebalancingDuringABatchChangesNoOutput) {
  TempDir dir;
  const std::string base = default_model_batch(
      dir, {"def fibonacci(n):", "import os", "class Stack:", "for i in range(10):", "# sort a list"}, 8);
  ASSERT_EQ(run_cli(base + dir.file("one.jsonl")).exit_code, 0);
  const std::string want = read_file(dir.file("one.jsonl"));
  ASSERT_NE(want.find("\"token_ids\""), std::string::npos);
  for (const std::string policy : {"peak-aware", "deepseek"}) {
    const std::string placement = dir.file("placement-" + policy + ".json");
    const auto run =
        run_shell("DEEPINFER_LOG=info " + std::string(DEEPINFER_CLI) + " " + base + dir.file("many.jsonl") +
                  " --data-parallel-size 2 --expert-parallel --num-redundant-experts 2"
                  " --eplb-interval 3 --eplb-window 3 --eplb-policy " +
                  policy + " --expert-placement-out " + placement + " 2>&1");
    ASSERT_EQ(run.exit_code, 0) << policy << ": " << run.out;
    EXPECT_EQ(read_file(dir.file("many.jsonl")), want) << policy;
    // Every 3 rounds of a batch of ~10 rounds: at least two re-placements, logged by rank 0 only.
    int num_logged = 0;
    for (size_t at = run.out.find("EPLB: re-placed"); at != std::string::npos;
         at = run.out.find("EPLB: re-placed", at + 1)) {
      ++num_logged;
    }
    EXPECT_GE(num_logged, 2) << policy << ": " << run.out;
    EXPECT_NE(run.out.find("(" + policy + ", window of 3 rounds)"), std::string::npos) << run.out;
    // The last placement: valid, and not the contiguous one the group started from.
    auto placements = deepinfer::load_placements(placement);
    ASSERT_TRUE(placements.ok()) << placements.error().message;
    ASSERT_EQ(placements->size(), 3u) << "the default model's 2 MoE layers and its draft module's";
    const auto contiguous = deepinfer::ExpertPlacement::contiguous(8, 2, 2).value();
    EXPECT_TRUE((*placements)[0] != contiguous || (*placements)[1] != contiguous) << read_file(placement);
    EXPECT_EQ((*placements)[2], contiguous) << "the draft module's layer does not run under EP: never moved";
    // The file starts a later run where this one ended, with the same outputs.
    const auto again = run_cli(base + dir.file("again.jsonl") +
                               " --data-parallel-size 2 --expert-parallel --expert-placement " + placement);
    ASSERT_EQ(again.exit_code, 0) << again.out;
    EXPECT_EQ(read_file(dir.file("again.jsonl")), want) << policy;
  }
}

// Every layout the MoE loaders read from the fixtures (per-expert tensors under both names, FP8
// per-expert tensors dequantised into the expert's own arena, GPT-OSS's fused and transposed
// tensors; the default model above is DeepSeek-V3's) re-loads experts by placement: re-placing
// after every round of a greedy generation changes no token.
TEST(ExpertParallelCli, RebalancingEveryRoundKeepsEveryLayoutsTokens) {
  TempDir dir;
  for (const char* name : {"deepseek_v3_fp8", "qwen3_moe", "mixtral", "gpt_oss"}) {
    const std::string base = "generate --model " + fixture(name) +
                             " --tokens 1,5,9,22,7,3 --max-tokens 6 --ignore-eos --batch-invariant --threads 1";
    const auto one = run_cli(base, false);
    ASSERT_EQ(one.exit_code, 0) << name;
    const auto many = run_shell("DEEPINFER_LOG=info " + std::string(DEEPINFER_CLI) + " " + base +
                                " --data-parallel-size 2 --expert-parallel --num-redundant-experts 2"
                                " --eplb-interval 1 --eplb-window 2 2>" +
                                dir.file("log.txt"));
    const std::string log = read_file(dir.file("log.txt"));
    ASSERT_EQ(many.exit_code, 0) << name << ": " << log;
    EXPECT_EQ(many.out, one.out) << name;
    EXPECT_NE(log.find("EPLB: re-placed"), std::string::npos) << name << ": " << log;
  }
}

TEST(ExpertParallelCli, BadEplbFlagsAreNamed) {
  const std::string model = "score --model " + fixture("qwen3_moe") + " --tokens 1,2,3 ";
  const auto no_ep = run_cli(model + "--data-parallel-size 2 --eplb-interval 5");
  EXPECT_EQ(no_ep.exit_code, 1);
  EXPECT_NE(no_ep.out.find("--eplb-interval needs --expert-parallel"), std::string::npos) << no_ep.out;
  const std::string ep = model + "--data-parallel-size 2 --expert-parallel ";
  const auto policy = run_cli(ep + "--eplb-policy greedy");
  EXPECT_EQ(policy.exit_code, 1);
  EXPECT_NE(policy.out.find("--eplb-policy must be peak-aware or deepseek"), std::string::npos) << policy.out;
  const auto window = run_cli(ep + "--eplb-window 0");
  EXPECT_EQ(window.exit_code, 1);
  EXPECT_NE(window.out.find("--eplb-window must be in [1, 1000000]"), std::string::npos) << window.out;
  const auto interval = run_cli(ep + "--eplb-interval -1");
  EXPECT_EQ(interval.exit_code, 1);
  EXPECT_NE(interval.out.find("--eplb-interval must be >= 0"), std::string::npos) << interval.out;
  const auto out = run_cli(model + "--expert-placement-out /tmp/x.json");
  EXPECT_EQ(out.exit_code, 1);
  EXPECT_NE(out.out.find("--expert-placement-out needs --expert-parallel"), std::string::npos) << out.out;
}

}  // namespace
