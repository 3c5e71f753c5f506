// Batch invariance end to end (issue 4, item 6): in batch-invariant mode, 32 prompts run
// together give the same token ids and bit-identical logprobs as each prompt run alone, greedy
// and seeded, also with chunked prefill, a prefix-cache hit and preemptions. The negative
// controls show the same comparison fails with the default kernels, and with an attention or
// MoE op made batch-dependent, so the tests can fail.
#include <gtest/gtest.h>

#include <random>

#include "batch_dependent_backend.h"
#include "engine_test_util.h"

namespace deepinfer::testing {
namespace {

constexpr int32_t kNumPrompts = 32;
constexpr int32_t kMaxTokens = 10;
constexpr int32_t kBlockSize = 16;

SamplingParams make_params(bool seeded, int32_t i) {
  SamplingParams params;
  params.max_tokens = kMaxTokens;
  params.logprobs = 3;
  if (seeded) {
    params.temperature = 0.9;
    params.top_p = 0.95;
    params.seed = 1000 + static_cast<uint64_t>(i);
  } else {
    params.temperature = 0.0;
  }
  return params;
}

// 32 prompts of 8..40 tokens; with shared_prefix, each starts with the same 2 full blocks.
std::vector<RequestSpec> make_requests(int32_t vocab, bool seeded, const std::vector<int32_t>& shared_prefix = {}) {
  std::mt19937 rng(seeded ? 7 : 3);
  std::uniform_int_distribution<int32_t> length(8, 40);
  std::vector<RequestSpec> requests;
  for (int32_t i = 0; i < kNumPrompts; ++i) {
    RequestSpec spec;
    spec.prompt = shared_prefix;
    const std::vector<int32_t> tail = random_tokens(rng, length(rng), vocab);
    spec.prompt.insert(spec.prompt.end(), tail.begin(), tail.end());
    spec.params = make_params(seeded, i);
    requests.push_back(std::move(spec));
  }
  return requests;
}

class BatchInvariance : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override { loaded_ = load_test_model(GetParam(), /*batch_invariant=*/true); }
  CausalLM& model() { return *loaded_.model; }
  int32_t vocab() { return static_cast<int32_t>(model().config().vocab_size); }

  TestModel loaded_;
};

// The batch runs on two threads, the lone prompts on one.
TEST_P(BatchInvariance, GreedyTogetherEqualsAlone) {
  const auto requests = make_requests(vocab(), /*seeded=*/false);
  const EngineConfig config = small_engine_config(256, kBlockSize);
  std::map<int64_t, RequestRun> together;
  {
    ScopedThreads two(2);
    together = run_together(model(), config, requests);
  }
  expect_identical(together, run_each_alone(model(), config, requests), "greedy");
}

TEST_P(BatchInvariance, SeededSamplingTogetherEqualsAlone) {
  const auto requests = make_requests(vocab(), /*seeded=*/true);
  const EngineConfig config = small_engine_config(256, kBlockSize);
  std::map<int64_t, RequestRun> together;
  {
    ScopedThreads two(2);
    together = run_together(model(), config, requests);
  }
  expect_identical(together, run_each_alone(model(), config, requests), "seeded");
}

// A 24-token budget cuts most prompts into chunks, and chunks share steps with decodes.
TEST_P(BatchInvariance, ChunkedPrefillEqualsAlone) {
  for (bool seeded : {false, true}) {
    const auto requests = make_requests(vocab(), seeded);
    const auto together = run_together(model(), small_engine_config(256, kBlockSize, /*budget=*/24), requests);
    expect_identical(together, run_each_alone(model(), small_engine_config(256, kBlockSize), requests),
                     seeded ? "chunked, seeded" : "chunked, greedy");
  }
}

// The shared 32-token prefix is cached by an earlier request; every prompt of the batch skips it.
TEST_P(BatchInvariance, PrefixCacheHitEqualsAloneMiss) {
  std::mt19937 rng(11);
  const std::vector<int32_t> prefix = random_tokens(rng, 2 * kBlockSize, vocab());
  for (bool seeded : {false, true}) {
    const auto requests = make_requests(vocab(), seeded, prefix);
    const EngineConfig config = small_engine_config(256, kBlockSize);
    EngineCore engine(model(), nullptr, config);
    std::vector<int32_t> warm_prompt = prefix;
    warm_prompt.push_back(1);
    ASSERT_TRUE(engine.add_request(1000, warm_prompt, make_params(false, 0)).ok());
    OutputCollector warm;
    run_engine(engine, warm);
    for (size_t i = 0; i < requests.size(); ++i) {
      ASSERT_TRUE(engine.add_request(static_cast<int64_t>(i), requests[i].prompt, requests[i].params).ok());
    }
    OutputCollector together;
    run_engine(engine, together);
    for (const auto& [id, run] : together.runs()) EXPECT_EQ(run.num_cached_tokens, 2 * kBlockSize) << id;
    auto runs = std::move(together.runs());
    const auto alone = run_each_alone(model(), config, requests);
    for (const auto& [id, run] : alone) EXPECT_EQ(run.num_cached_tokens, 0) << id;
    expect_identical(runs, alone, seeded ? "prefix hit, seeded" : "prefix hit, greedy");
  }
}

// 40 blocks of 16 tokens hold ~12 of the 32 sequences at full length: the scheduler preempts
// and recomputes.
TEST_P(BatchInvariance, PreemptedEqualsAlone) {
  for (bool seeded : {false, true}) {
    const auto requests = make_requests(vocab(), seeded);
    EngineStats stats;
    const auto together = run_together(model(), small_engine_config(40, kBlockSize), requests, &stats);
    EXPECT_GT(stats.num_preemptions, 0);
    expect_identical(together, run_each_alone(model(), small_engine_config(256, kBlockSize), requests),
                     seeded ? "preempted, seeded" : "preempted, greedy");
  }
}

// deepseek_v3 (MLA + grouped expert GEMMs) and qwen3_moe: expert groups change size with the batch.
INSTANTIATE_TEST_SUITE_P(Fixtures, BatchInvariance,
                         ::testing::Values("qwen3", "llama", "mistral_swa", "deepseek_v3", "qwen3_moe"));

// How many prompts' tokens or logprob bits differ between the two runs.
int32_t count_different(const std::map<int64_t, RequestRun>& together, const std::map<int64_t, RequestRun>& alone) {
  int32_t num_different = 0;
  for (const auto& [id, run] : alone) {
    const SampleRun& a = run.samples.at(0);
    const SampleRun& t = together.at(id).samples.at(0);
    if (a.token_ids != t.token_ids || !same_bits(a.logprobs, t.logprobs)) ++num_different;
  }
  return num_different;
}

// Negative control: the default kernels take the GEMV for a few rows and oneDNN for many, so the
// 32-prompt prefill (hundreds of rows) and a lone prompt's prefill (8-40 rows) or its decode (1
// row) round differently; the comparison above must then find a difference.
TEST(BatchInvarianceControl, DefaultKernelsDifferBetweenTogetherAndAlone) {
  TestModel loaded = load_test_model("qwen3", /*batch_invariant=*/false);
  const int32_t vocab = static_cast<int32_t>(loaded.model->config().vocab_size);
  const auto requests = make_requests(vocab, /*seeded=*/false);
  const EngineConfig config = small_engine_config(256, kBlockSize);
  const auto together = run_together(*loaded.model, config, requests);
  EXPECT_GT(count_different(together, run_each_alone(*loaded.model, config, requests)), 0)
      << "no prompt differed: the invariance tests above could not fail";
}

struct PerturbedOp {
  std::string fixture;
  std::string op;        // BatchDependentBackend's op
  int64_t min_rows = 0;  // sequences (attention) or tokens (experts) above which it perturbs
};

class BatchDependentControl : public ::testing::TestWithParam<PerturbedOp> {};

// Negative control for the MoE / MLA fixtures: in invariant mode, but with MLA's attention
// perturbed in batches of several sequences, or the experts in steps of more tokens than any
// lone prompt has (the batch's prefill), the comparison above must find a difference.
TEST_P(BatchDependentControl, ComparisonFindsTheBatchDependentOp) {
  const PerturbedOp& perturbed = GetParam();
  BatchDependentBackend* control = nullptr;
  TestModel loaded = load_test_model(perturbed.fixture, /*batch_invariant=*/true, [&](std::unique_ptr<Backend> inner) {
    auto wrapped = std::make_unique<BatchDependentBackend>(std::move(inner), perturbed.op, perturbed.min_rows);
    control = wrapped.get();
    return std::unique_ptr<Backend>(std::move(wrapped));
  });
  const int32_t vocab = static_cast<int32_t>(loaded.model->config().vocab_size);
  const auto requests = make_requests(vocab, /*seeded=*/false);
  const EngineConfig config = small_engine_config(256, kBlockSize);
  const auto together = run_together(*loaded.model, config, requests);
  const int64_t num_perturbed_together = control->num_perturbed();
  const auto alone = run_each_alone(*loaded.model, config, requests);
  ASSERT_GT(num_perturbed_together, 0);
  EXPECT_EQ(control->num_perturbed(), num_perturbed_together) << "a lone prompt was perturbed too";
  EXPECT_GT(count_different(together, alone), 0) << perturbed.op << " changed with the batch, unnoticed";
}

INSTANTIATE_TEST_SUITE_P(Fixtures, BatchDependentControl,
                         ::testing::Values(PerturbedOp{"deepseek_v3", "paged_attention", 1},
                                           PerturbedOp{"qwen3_moe", "moe_experts", 40}),
                         [](const auto& info) { return info.param.fixture; });

}  // namespace
}  // namespace deepinfer::testing
