// Structured output in the engine loop: a request whose grammar compiles waits on its own while
// the others decode; a compile that fails or times out ends its request alone with the error on
// its output, before any token; an aborted request cancels its compile unless another request
// shares it; the offline API reports the error on that request.
#include <gtest/gtest.h>

#include <chrono>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "deepinfer/llm.h"
#include "engine_test_util.h"
#include "greedy_params.h"
#include "text_model_dir.h"
#include "tokenizer/tokenizer.h"

namespace deepinfer::testing {
namespace {

// enum values the validator checks against a pattern whose NFA has ~27K states: a large fraction
// of a second per 10K-character value, with the deadline and cancellation checked every 4096
// bytes. (None matches: after minutes the compile would end with an error.)
std::string slow_schema(int num_values) {
  nlohmann::json values = nlohmann::json::array();
  for (int i = 0; i < num_values; ++i) values.push_back(std::string(10'000, 'a') + std::to_string(i));
  return nlohmann::json{{"type", "string"}, {"pattern", ".{0,1000}x"}, {"enum", values}}.dump();
}

SamplingParams schema_params(const std::string& schema, int32_t max_tokens) {
  SamplingParams p;
  p.temperature = 0.0;
  p.max_tokens = max_tokens;
  StructuredOutputParams s;
  s.kind = StructuredOutputParams::Kind::kJsonSchema;
  s.spec = schema;
  p.structured_output = s;
  return p;
}

// What one request got over the steps: tokens per sample, its finish and its error.
struct Outcome {
  std::map<int32_t, std::vector<int32_t>> tokens;
  std::map<int32_t, FinishReason> finish_reasons;
  std::optional<Error> error;
  bool finished = false;
  int32_t num_tokens() const {
    int32_t n = 0;
    for (const auto& [index, ids] : tokens) n += static_cast<int32_t>(ids.size());
    return n;
  }
};

class StructuredEngine : public ::testing::Test {
 protected:
  void SetUp() override {
    model_ = load_test_model(dir_.path(), false);
    tokenizer_.emplace(Tokenizer::load(dir_.path()).value());
  }

  std::unique_ptr<EngineCore> make_engine(double timeout_seconds) {
    EngineConfig config = small_engine_config(64);
    config.grammar_compiler.timeout_seconds = timeout_seconds;
    return std::make_unique<EngineCore>(*model_.model, &*tokenizer_, config);
  }

  void step(EngineCore& engine) {
    for (const RequestOutput& out : engine.step()) {
      Outcome& o = outcomes_[out.request_id];
      EXPECT_FALSE(o.finished) << "request " << out.request_id << " reported after it finished";
      for (const SampleOutput& s : out.samples) {
        o.tokens[s.index].insert(o.tokens[s.index].end(), s.new_token_ids.begin(), s.new_token_ids.end());
        if (s.finished) o.finish_reasons[s.index] = s.finish_reason;
      }
      if (out.error) o.error = out.error;
      o.finished |= out.finished;
    }
    engine.check_invariants();
  }

  void run_to_end(EngineCore& engine) {
    for (int i = 0; i < 10'000 && engine.has_unfinished_requests(); ++i) step(engine);
    EXPECT_FALSE(engine.has_unfinished_requests());
  }

  const std::vector<int32_t> prompt_ = {'{', '"', 'a', '"', ':'};
  TextModelDir dir_{/*with_chat_template=*/false};
  TestModel model_;
  std::optional<Tokenizer> tokenizer_;
  std::map<int64_t, Outcome> outcomes_;
};

TEST_F(StructuredEngine, SlowCompileHoldsOnlyItsRequestAndAbortCancelsIt) {
  auto engine = make_engine(/*timeout_seconds=*/120);
  ASSERT_TRUE(engine->add_request(0, prompt_, schema_params(slow_schema(400), 16)).ok());
  ASSERT_TRUE(engine->add_request(1, prompt_, greedy_params(8)).ok());
  // The plain request decodes to its end while the other's grammar still compiles.
  while (!outcomes_[1].finished) {
    step(*engine);
    ASSERT_FALSE(outcomes_[0].finished) << "the constrained request ended before the plain one";
    ASSERT_EQ(outcomes_[0].num_tokens(), 0);
  }
  EXPECT_EQ(outcomes_[1].num_tokens(), 8);
  EXPECT_EQ(outcomes_[1].finish_reasons[0], FinishReason::kLength);
  // Aborting the waiting request cancels its compile: the service's one thread is free again, so
  // a small grammar that queues behind it compiles and runs well before the slow compile's
  // timeout.
  const auto start = std::chrono::steady_clock::now();
  engine->abort_request(0);
  ASSERT_TRUE(engine->add_request(2, prompt_, schema_params(R"({"type":"boolean"})", 8)).ok());
  run_to_end(*engine);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(60));
  EXPECT_EQ(outcomes_[0].finish_reasons[0], FinishReason::kAbort);
  EXPECT_FALSE(outcomes_[0].error);
  ASSERT_FALSE(outcomes_[2].error) << outcomes_[2].error->message;
  std::string text;
  for (int32_t id : outcomes_[2].tokens[0]) text += tokenizer_->decode({id}, false);
  EXPECT_TRUE(text == "true" || text == "false") << text;
}

TEST_F(StructuredEngine, FailedOrTimedOutCompilesEndOnlyTheirRequest) {
  auto engine = make_engine(/*timeout_seconds=*/0.5);
  SamplingParams unsupported = schema_params(R"({"type":"array","uniqueItems":true})", 8);
  unsupported.n = 2;
  ASSERT_TRUE(engine->add_request(0, prompt_, unsupported).ok());
  ASSERT_TRUE(engine->add_request(1, prompt_, schema_params(slow_schema(400), 8)).ok());
  // The same spec shares one compile: aborting one request leaves it running for the other.
  ASSERT_TRUE(engine->add_request(2, prompt_, schema_params(slow_schema(400), 8)).ok());
  ASSERT_TRUE(engine->add_request(3, prompt_, greedy_params(8)).ok());
  ASSERT_TRUE(engine->add_request(4, prompt_, schema_params(R"({"enum":["yes","no"]})", 8)).ok());
  engine->abort_request(2);
  run_to_end(*engine);

  const Outcome& failed = outcomes_[0];
  ASSERT_TRUE(failed.error);
  EXPECT_NE(failed.error->message.find("unsupported keyword 'uniqueItems' at '#/uniqueItems'"), std::string::npos)
      << failed.error->message;
  EXPECT_EQ(failed.num_tokens(), 0);
  EXPECT_EQ(failed.finish_reasons.size(), 2u);  // both samples end
  const Outcome& timed_out = outcomes_[1];
  ASSERT_TRUE(timed_out.error);
  EXPECT_NE(timed_out.error->message.find("timed out"), std::string::npos) << timed_out.error->message;
  EXPECT_EQ(timed_out.num_tokens(), 0);
  EXPECT_EQ(timed_out.finish_reasons.at(0), FinishReason::kAbort);
  EXPECT_FALSE(outcomes_[2].error);
  EXPECT_EQ(outcomes_[3].num_tokens(), 8);
  EXPECT_FALSE(outcomes_[3].error);
  ASSERT_FALSE(outcomes_[4].error) << outcomes_[4].error->message;
  std::string text;
  for (int32_t id : outcomes_[4].tokens[0]) text += tokenizer_->decode({id}, false);
  EXPECT_TRUE(text == "\"yes\"" || text == "\"no\"") << text;
}

TEST_F(StructuredEngine, OfflineApiReportsTheCompileErrorOnItsPrompt) {
  LLMConfig config;
  config.model_dir = dir_.path();
  config.show_progress = false;
  config.kv_cache_bytes = int64_t{16} << 20;
  auto llm = LLM::open(config);
  ASSERT_TRUE(llm.ok()) << llm.error().message;
  const std::vector<SamplingParams> params = {schema_params(R"({"type":"array","uniqueItems":true})", 8),
                                              schema_params(R"({"type":"boolean"})", 8)};
  auto results = (*llm)->generate({Prompt{"x", {}}, Prompt{"y", {}}}, params);
  ASSERT_TRUE(results.ok()) << results.error().message;
  EXPECT_NE(results->at(0).error.find("unsupported keyword 'uniqueItems'"), std::string::npos) << results->at(0).error;
  EXPECT_TRUE(results->at(0).outputs.at(0).token_ids.empty());
  EXPECT_EQ(results->at(0).outputs.at(0).finish_reason, "abort");
  EXPECT_TRUE(results->at(1).error.empty()) << results->at(1).error;
  EXPECT_TRUE(results->at(1).outputs.at(0).text == "true" || results->at(1).outputs.at(0).text == "false")
      << results->at(1).outputs.at(0).text;
}

}  // namespace
}  // namespace deepinfer::testing
