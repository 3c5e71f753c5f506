// `deepinfer generate` on the sliding-window architectures' fixtures (GPT-OSS, Gemma 3): the
// greedy continuation transformers produced, up to its first near-tie.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "run_cli.h"

namespace {

std::string join_ids(const std::vector<int32_t>& ids) {
  std::ostringstream os;
  for (size_t i = 0; i < ids.size(); ++i) os << (i ? "," : "") << ids[i];
  return os.str();
}

std::vector<int32_t> parse_ids(const std::string& line) {
  std::vector<int32_t> ids;
  std::istringstream in(line);
  std::string item;
  while (std::getline(in, item, ',')) ids.push_back(std::stoi(item));
  return ids;
}

class GenerateSwaArch : public ::testing::TestWithParam<std::string> {};

TEST_P(GenerateSwaArch, GreedyMatchesTransformers) {
  const std::string dir = std::string(DEEPINFER_TEST_DATA_DIR) + "/" + GetParam();
  std::ifstream in(dir + "/expected.json");
  ASSERT_TRUE(in.good()) << dir << "/expected.json is missing (tools/reference/make_fixtures_swa.py makes it)";
  const nlohmann::json greedy = nlohmann::json::parse(in)["greedy"];
  const auto r = deepinfer::testing::run_cli("generate --model " + dir + " --tokens " +
                                                 join_ids(greedy["prompt"].get<std::vector<int32_t>>()) +
                                                 " --max-tokens 16 --ignore-eos",
                                             false);
  ASSERT_EQ(r.exit_code, 0) << r.out;
  const std::vector<int32_t> got = parse_ids(r.out.substr(0, r.out.find('\n')));
  const auto want = greedy["tokens"].get<std::vector<int32_t>>();
  const auto margins = greedy["margins"].get<std::vector<double>>();
  ASSERT_EQ(got.size(), want.size()) << r.out;
  for (size_t i = 0; i < want.size(); ++i) {
    ASSERT_EQ(got[i], want[i]) << "step " << i;
    if (margins[i] < 1e-3) break;  // a near-tie: later steps may legitimately diverge
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, GenerateSwaArch, ::testing::Values("gpt_oss", "gemma3"),
                         [](const auto& info) { return info.param; });

}  // namespace
