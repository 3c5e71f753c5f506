// `deepinfer generate --input/--output` round trip: one output line per input line, in input
// order, with n samples and logprobs when asked; with --batch-invariant every line equals the
// same request run alone through deepinfer::LLM in this process (the CLI batches them 2 at a
// time, so the batches differ).
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "deepinfer/llm.h"
#include "engine/sampling_json.h"
#include "run_cli.h"
#include "text_model_dir.h"

namespace deepinfer::testing {
namespace {

using nlohmann::json;

class GenerateBatchCli : public ::testing::Test {
 protected:
  void SetUp() override {
    work_ = std::filesystem::temp_directory_path() / ("deepinfer_batch_" + std::to_string(::getpid()));
    std::filesystem::create_directories(work_);
  }
  void TearDown() override { std::filesystem::remove_all(work_); }

  std::string write_input(const std::vector<std::string>& lines) {
    const std::string path = (work_ / "in.jsonl").string();
    std::ofstream out(path);
    for (const std::string& line : lines) out << line << "\n";
    return path;
  }

  std::vector<json> read_output() {
    std::ifstream in(work_ / "out.jsonl");
    std::vector<json> lines;
    std::string line;
    while (std::getline(in, line)) lines.push_back(json::parse(line));
    return lines;
  }

  std::string output_path() const { return (work_ / "out.jsonl").string(); }

  TextModelDir model_{/*with_chat_template=*/false};
  std::filesystem::path work_;
};

void expect_sample_equals(const json& got, const SampleResult& want, const std::string& what) {
  EXPECT_EQ(got.at("token_ids").get<std::vector<int32_t>>(), want.token_ids) << what;
  EXPECT_EQ(got.at("text").get<std::string>(), want.text) << what;
  EXPECT_EQ(got.at("finish_reason").get<std::string>(), want.finish_reason) << what;
  if (want.logprobs.empty()) {
    EXPECT_FALSE(got.contains("logprobs")) << what;
  } else {
    // Doubles survive the JSON text exactly (shortest round-trip formatting).
    EXPECT_EQ(got.at("logprobs").get<std::vector<double>>(), want.logprobs) << what;
    EXPECT_EQ(got.at("top_logprobs").size(), want.top_logprobs.size()) << what;
  }
}

TEST_F(GenerateBatchCli, LinesComeBackInOrderAndEqualTheRequestsAlone) {
  const std::vector<std::string> lines = {
      R"({"prompt": "Hello there", "max_tokens": 6, "logprobs": 2})",
      R"({"prompt_token_ids": [5, 6, 7, 8, 9, 10, 11, 12], "max_tokens": 5, "n": 3, "temperature": 1.0, "seed": 42, "logprobs": 1})",
      R"({"prompt": "abc", "max_tokens": 7, "temperature": 0.7, "top_p": 0.9, "seed": 3})",
      R"({"prompt_token_ids": [1, 2, 3], "max_tokens": 3, "prompt_logprobs": 1})",
      R"({"prompt": "The end", "max_tokens": 9, "stop": ["zz"], "presence_penalty": 1.0})",
  };
  const std::string input = write_input(lines);
  const CliResult cli = run_cli("generate --model " + model_.path() + " --input " + input + " --output " +
                                output_path() + " --batch-invariant --max-num-seqs 2 --threads 1");
  ASSERT_EQ(cli.exit_code, 0) << cli.out;
  const std::vector<json> out = read_output();
  ASSERT_EQ(out.size(), lines.size());

  LLMConfig config;
  config.model_dir = model_.path();
  config.batch_invariant = true;
  config.show_progress = false;
  config.kv_cache_bytes = int64_t{16} << 20;
  auto llm = std::move(LLM::open(config).value());
  SamplingParams defaults;  // the CLI's flag defaults
  defaults.max_tokens = 64;
  defaults.temperature = 0.0;
  for (size_t i = 0; i < lines.size(); ++i) {
    const std::string what = "line " + std::to_string(i);
    const json request = json::parse(lines[i]);
    const SamplingParams params = sampling_params_from_json(request, defaults).value();
    Prompt prompt;
    if (request.contains("prompt")) {
      prompt.text = request["prompt"].get<std::string>();
    } else {
      prompt.token_ids = request["prompt_token_ids"].get<std::vector<int32_t>>();
    }
    const GenerationResult want = llm->generate({prompt}, {params}).value().at(0);
    EXPECT_EQ(out[i].at("index").get<size_t>(), i) << what;
    EXPECT_EQ(out[i].at("num_prompt_tokens").get<size_t>(), want.prompt_token_ids.size()) << what;
    expect_sample_equals(out[i], want.outputs.at(0), what);
    ASSERT_EQ(out[i].contains("outputs"), params.n > 1) << what;
    if (params.n > 1) {
      ASSERT_EQ(out[i]["outputs"].size(), static_cast<size_t>(params.n)) << what;
      for (int32_t k = 0; k < params.n; ++k) {
        EXPECT_EQ(out[i]["outputs"][k].at("index").get<int32_t>(), k) << what;
        expect_sample_equals(out[i]["outputs"][k], want.outputs.at(static_cast<size_t>(k)),
                             what + " sample " + std::to_string(k));
      }
    }
    if (params.prompt_logprobs) {
      const json& scored = out[i].at("prompt_logprobs");
      ASSERT_EQ(scored.size(), want.prompt_token_logprobs.size()) << what;
      EXPECT_TRUE(scored[0].is_null()) << what;
      for (size_t p = 1; p < scored.size(); ++p) EXPECT_EQ(scored[p].get<double>(), *want.prompt_token_logprobs[p]);
    }
  }
}

TEST_F(GenerateBatchCli, BadLineIsAnErrorNamingIt) {
  const std::string input = write_input({R"({"prompt": "fine"})", R"({"prompt": "bad", "temperature": "hot"})"});
  const CliResult cli =
      run_cli("generate --model " + model_.path() + " --input " + input + " --output " + output_path());
  EXPECT_EQ(cli.exit_code, 1);
  EXPECT_NE(cli.out.find("in.jsonl:2"), std::string::npos) << cli.out;
  EXPECT_NE(cli.out.find("temperature"), std::string::npos) << cli.out;
}

}  // namespace
}  // namespace deepinfer::testing
