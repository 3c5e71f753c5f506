// Randomized scheduler property tests: random arrivals, prompt lengths, max_tokens, n, shared
// prefixes, priorities, step budgets, tiny KV pools (preemption) and aborts at random steps.
// After every step the KV bookkeeping must be consistent; at the end nothing leaks, every sample
// finished exactly once with the right reason and token count, and (batch-invariant mode) its
// tokens are the reference's, or a prefix of them when it was aborted.
#include <gtest/gtest.h>

#include <algorithm>
#include <optional>
#include <random>

#include "engine_test_util.h"

namespace deepinfer::testing {
namespace {

struct PlannedRequest {
  int64_t id = 0;
  int64_t arrival_step = 0;
  std::optional<int64_t> abort_step;
  RequestSpec spec;
  int32_t priority = 0;
  int32_t expected_tokens = 0;  // max_tokens, or fewer where the context length ends it
};

struct Workload {
  EngineConfig config;
  std::vector<PlannedRequest> requests;
};

int32_t pick(std::mt19937& rng, int32_t low, int32_t high) {
  return std::uniform_int_distribution<int32_t>(low, high)(rng);
}

Workload make_workload(uint32_t seed, int32_t vocab) {
  std::mt19937 rng(seed);
  Workload w;
  EngineConfig& c = w.config;
  c.block_size = std::vector<int32_t>{4, 8, 16}[static_cast<size_t>(pick(rng, 0, 2))];
  c.max_model_len = pick(rng, 40, 120);
  c.enable_prefix_caching = pick(rng, 0, 4) != 0;
  c.scheduler.enable_chunked_prefill = pick(rng, 0, 3) != 0;
  // Without chunking a whole prompt (or a preempted sequence's recompute) must fit one step.
  c.scheduler.max_num_batched_tokens = c.scheduler.enable_chunked_prefill ? pick(rng, 4, 64) : c.max_model_len;
  c.scheduler.max_num_seqs = pick(rng, 1, 10);
  c.scheduler.priority_policy = pick(rng, 0, 1) == 1;
  std::vector<std::vector<int32_t>> prefixes;
  for (int32_t i = 0; i < 3; ++i) prefixes.push_back(random_tokens(rng, pick(rng, 0, 2 * c.block_size + 3), vocab));
  const int32_t num_requests = pick(rng, 4, 16);
  int32_t largest_blocks = 1;
  for (int32_t i = 0; i < num_requests; ++i) {
    PlannedRequest r;
    r.id = 100 + i;
    r.arrival_step = pick(rng, 0, 25);
    r.priority = pick(rng, 0, 2);
    std::vector<int32_t> prompt = prefixes[static_cast<size_t>(pick(rng, 0, 2))];
    const std::vector<int32_t> tail = random_tokens(rng, pick(rng, 1, 24), vocab);
    prompt.insert(prompt.end(), tail.begin(), tail.end());
    prompt.resize(std::min<size_t>(prompt.size(), static_cast<size_t>(c.max_model_len - 1)));
    SamplingParams& p = r.spec.params;
    p.max_tokens = pick(rng, 1, 20);
    p.n = pick(rng, 0, 3) == 0 ? pick(rng, 2, 3) : 1;
    p.temperature = pick(rng, 0, 1) == 0 ? 0.0 : 0.8;
    p.seed = static_cast<uint64_t>(rng());
    const auto num_prompt = static_cast<int32_t>(prompt.size());
    r.expected_tokens = std::min(p.max_tokens, c.max_model_len - num_prompt);
    largest_blocks = std::max(largest_blocks, blocks_for_tokens(num_prompt + r.expected_tokens, c.block_size));
    if (pick(rng, 0, 4) == 0) r.abort_step = r.arrival_step + pick(rng, 0, 12);
    r.spec.prompt = std::move(prompt);
    w.requests.push_back(std::move(r));
  }
  // From just the largest request's blocks (preemption nearly every step) to room for a few.
  c.num_kv_blocks = largest_blocks + pick(rng, 0, 3 * largest_blocks);
  return w;
}

struct Totals {
  int64_t preemptions = 0;
  int64_t hit_tokens = 0;
  int64_t aborted = 0;
  int64_t forks = 0;
};

void run_workload(CausalLM& model, const Workload& w, Totals& totals) {
  OutputCollector collector;
  {
    EngineCore engine(model, nullptr, w.config);
    size_t num_added = 0;
    int64_t step = 0;
    for (; step < 20000; ++step) {
      for (const PlannedRequest& r : w.requests) {
        if (r.arrival_step == step) {
          auto added = engine.add_request(r.id, r.spec.prompt, r.spec.params, r.priority);
          ASSERT_TRUE(added.ok()) << added.error().message;
          ++num_added;
        }
        if (r.abort_step == step) engine.abort_request(r.id);
      }
      if (num_added == w.requests.size() && !engine.has_unfinished_requests()) break;
      collector.absorb(engine.step());
      engine.check_invariants();
      if (::testing::Test::HasFatalFailure()) return;
    }
    ASSERT_LT(step, 20000) << "the engine did not finish";
    const EngineStats stats = engine.stats();
    EXPECT_EQ(stats.kv_usage, 0.0) << "blocks leaked: all must be free or evictable";
    EXPECT_EQ(stats.num_running, 0u);
    EXPECT_EQ(stats.num_waiting, 0u);
    totals.preemptions += stats.num_preemptions;
    totals.hit_tokens += stats.prefix_cache.hit_tokens;
  }
  for (const PlannedRequest& r : w.requests) {
    const auto found = collector.runs().find(r.id);
    ASSERT_NE(found, collector.runs().end()) << "request " << r.id << " never reported";
    const RequestRun& run = found->second;
    EXPECT_TRUE(run.finished) << r.id;
    ASSERT_EQ(run.samples.size(), static_cast<size_t>(r.spec.params.n)) << r.id;
    EXPECT_EQ(run.num_prompt_tokens, static_cast<int32_t>(r.spec.prompt.size())) << r.id;
    for (const auto& [index, sample] : run.samples) {
      const std::string what = "request " + std::to_string(r.id) + " sample " + std::to_string(index);
      EXPECT_EQ(sample.num_finish_reports, 1) << what;
      RequestSpec spec = r.spec;
      spec.params.n = 1;
      spec.params.max_tokens = r.expected_tokens;
      const SampleRun want = reference_sample(model, spec.prompt, spec.params, index);
      if (sample.finish_reason == FinishReason::kAbort) {
        ASSERT_TRUE(r.abort_step.has_value()) << what;
        ASSERT_LE(sample.token_ids.size(), want.token_ids.size()) << what;
        EXPECT_TRUE(std::equal(sample.token_ids.begin(), sample.token_ids.end(), want.token_ids.begin())) << what;
        ++totals.aborted;
      } else {
        EXPECT_EQ(sample.finish_reason, FinishReason::kLength) << what;
        EXPECT_EQ(sample.token_ids, want.token_ids) << what;
      }
      if (index > 0) ++totals.forks;
    }
  }
}

TEST(SchedulerProperty, RandomWorkloadsFinishCleanlyWithTheReferenceTokens) {
  TestModel loaded = load_test_model("llama", /*batch_invariant=*/true);
  const auto vocab = static_cast<int32_t>(loaded.model->config().vocab_size);
  Totals totals;
  for (uint32_t seed = 0; seed < 100; ++seed) {
    SCOPED_TRACE("workload seed " + std::to_string(seed));
    run_workload(*loaded.model, make_workload(seed, vocab), totals);
    if (HasFatalFailure()) return;
  }
  // The workloads must have exercised what they are for.
  EXPECT_GT(totals.preemptions, 0);
  EXPECT_GT(totals.hit_tokens, 0);
  EXPECT_GT(totals.aborted, 0);
  EXPECT_GT(totals.forks, 0);
}

}  // namespace
}  // namespace deepinfer::testing
