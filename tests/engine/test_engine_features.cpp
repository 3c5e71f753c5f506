// Engine features against one-sequence reference runs, in batch-invariant mode: preemption by
// recompute, prefix-cache hits, PROMPT -> COMPLETION hand-over, n > 1 sharing the prompt's
// blocks, and penalties kept incrementally across both. Each must give exactly what the request
// gives alone.
#include <gtest/gtest.h>

#include <functional>
#include <random>
#include <set>

#include "engine_test_util.h"

namespace deepinfer::testing {
namespace {

constexpr int32_t kBlockSize = 16;

class EngineFeatures : public ::testing::Test {
 protected:
  void SetUp() override { loaded_ = load_test_model("qwen3", /*batch_invariant=*/true); }
  CausalLM& model() { return *loaded_.model; }
  int32_t vocab() { return static_cast<int32_t>(model().config().vocab_size); }

  static SamplingParams params(bool seeded, int32_t max_tokens, uint64_t seed = 1) {
    SamplingParams p;
    p.max_tokens = max_tokens;
    p.logprobs = 2;
    p.temperature = seeded ? 1.0 : 0.0;
    p.seed = seed;
    return p;
  }

  // A continuation whose KV never arrived (a cluster's push failed): the prefilled request without it.
  static void drop_kv(PrefilledRequest& p) {
    p.kv.clear();
    p.swa_kv.clear();
    p.kv_not_carried = true;
  }

  // Two parts of one sample's run (the PROMPT engine's first token, then what followed): its
  // tokens and logprobs in order.
  static SampleRun joined(const SampleRun& first, const SampleRun& rest) {
    SampleRun run = first;
    run.token_ids.insert(run.token_ids.end(), rest.token_ids.begin(), rest.token_ids.end());
    run.logprobs.insert(run.logprobs.end(), rest.logprobs.begin(), rest.logprobs.end());
    return run;
  }

  // The requests through a PROMPT engine of model() with config: its outputs (each request's first
  // token) in prefill, its handovers returned in request order. Each request runs with n = 1 (for
  // n > 1, sample 0, as a cluster's prefill worker runs it).
  std::vector<PrefilledRequest> run_prompt_engine(EngineConfig config, const std::vector<RequestSpec>& requests,
                                                  OutputCollector& prefill) {
    config.mode = EngineMode::kPrompt;
    EngineCore prompt_engine(model(), nullptr, config);
    for (size_t i = 0; i < requests.size(); ++i) {
      SamplingParams sample_zero = requests[i].params;
      sample_zero.n = 1;
      EXPECT_TRUE(prompt_engine.add_request(static_cast<int64_t>(i), requests[i].prompt, sample_zero).ok());
    }
    run_engine(prompt_engine, prefill);
    std::vector<PrefilledRequest> prefilled = prompt_engine.take_prefilled();
    EXPECT_EQ(prefilled.size(), requests.size());
    return prefilled;
  }

  void expect_equals_reference(const RequestSpec& spec, const SampleRun& got, int32_t sample_index,
                               const std::string& what) {
    const SampleRun want = reference_sample(model(), spec.prompt, spec.params, sample_index);
    EXPECT_EQ(got.token_ids, want.token_ids) << what;
    EXPECT_TRUE(same_bits(got.logprobs, want.logprobs)) << what;
    EXPECT_TRUE(same_top_bits(got.top, want.top)) << what;
  }

  TestModel loaded_;
};

// Three 30-token prompts growing to 70 tokens need 15 blocks; the pool has 8, so sequences are
// preempted, recomputed from their prompt and outputs, and resumed.
TEST_F(EngineFeatures, PreemptedRequestsFinishAsAlone) {
  for (bool seeded : {false, true}) {
    std::mt19937 rng(seeded ? 21 : 22);
    std::vector<RequestSpec> requests;
    for (int32_t i = 0; i < 3; ++i) requests.push_back({random_tokens(rng, 30, vocab()), params(seeded, 40, 50 + i)});
    EngineStats stats;
    const auto runs = run_together(model(), small_engine_config(8, kBlockSize), requests, &stats);
    EXPECT_GT(stats.num_preemptions, 0);
    for (size_t i = 0; i < requests.size(); ++i) {
      const SampleRun& got = runs.at(static_cast<int64_t>(i)).samples.at(0);
      EXPECT_EQ(got.finish_reason, FinishReason::kLength);
      expect_equals_reference(requests[i], got, 0, "request " + std::to_string(i));
    }
  }
}

// Penalised samples keep their penalties' history as they go: preempted and recomputed (their
// outputs are not counted twice) and forked (each sample keeps its own), each still equals its
// reference, which walks the whole history with the stateless processors every step.
TEST_F(EngineFeatures, PenalisedSamplesPreemptedAndForkedEqualTheirReference) {
  std::mt19937 rng(61);
  std::vector<RequestSpec> requests;
  for (int32_t i = 0; i < 3; ++i) {
    SamplingParams p = params(true, 40, 90 + i);
    p.repetition_penalty = 1.3;
    p.frequency_penalty = 0.4;
    p.presence_penalty = -0.3;
    requests.push_back({random_tokens(rng, 30, vocab()), p});
  }
  std::vector<RequestSpec> with_n = requests;
  for (RequestSpec& spec : with_n) spec.params.n = 2;
  EngineStats stats;
  const auto runs = run_together(model(), small_engine_config(8, kBlockSize), with_n, &stats);
  EXPECT_GT(stats.num_preemptions, 0);
  for (size_t i = 0; i < requests.size(); ++i) {
    const RequestRun& run = runs.at(static_cast<int64_t>(i));
    ASSERT_EQ(run.samples.size(), 2u);
    for (const auto& [index, sample] : run.samples) {
      expect_equals_reference(requests[i], sample, index, "request " + std::to_string(i) + " sample " +
                                                              std::to_string(index));
    }
  }
}

// A second request sharing 40 prompt tokens finds the first 2 blocks cached and skips them;
// its tokens and logprobs equal a miss on a fresh engine, bit for bit.
TEST_F(EngineFeatures, PrefixHitEqualsMiss) {
  std::mt19937 rng(31);
  const std::vector<int32_t> first_prompt = random_tokens(rng, 50, vocab());
  RequestSpec second{std::vector<int32_t>(first_prompt.begin(), first_prompt.begin() + 40), params(true, 8)};
  const std::vector<int32_t> tail = random_tokens(rng, 7, vocab());
  second.prompt.insert(second.prompt.end(), tail.begin(), tail.end());

  const EngineConfig config = small_engine_config(64, kBlockSize);
  EngineCore engine(model(), nullptr, config);
  ASSERT_TRUE(engine.add_request(0, first_prompt, params(false, 8)).ok());
  OutputCollector first;
  run_engine(engine, first);
  EXPECT_EQ(first.runs().at(0).num_cached_tokens, 0);
  const PrefixCacheStats before = engine.stats().prefix_cache;
  EXPECT_EQ(before.queried_tokens, 50);
  EXPECT_EQ(before.hit_tokens, 0);
  EXPECT_EQ(engine.stats().kv_usage, 0.0);  // finished: its blocks are cached but evictable

  ASSERT_TRUE(engine.add_request(1, second.prompt, second.params).ok());
  OutputCollector hit;
  run_engine(engine, hit);
  const PrefixCacheStats after = engine.stats().prefix_cache;
  EXPECT_EQ(hit.runs().at(1).num_cached_tokens, 2 * kBlockSize);
  EXPECT_EQ(after.queried_tokens - before.queried_tokens, 47);
  EXPECT_EQ(after.hit_tokens - before.hit_tokens, 2 * kBlockSize);

  // The miss: the same request on a fresh engine; and with prefix caching off nothing hits.
  auto hit_runs = std::move(hit.runs());
  EngineConfig no_cache = config;
  no_cache.enable_prefix_caching = false;
  const auto miss = run_together(model(), no_cache, {second});
  EXPECT_EQ(miss.at(0).num_cached_tokens, 0);
  ASSERT_EQ(hit_runs.at(1).samples.at(0).token_ids.size(), 8u);
  EXPECT_EQ(hit_runs.at(1).samples.at(0).token_ids, miss.at(0).samples.at(0).token_ids);
  EXPECT_TRUE(same_bits(hit_runs.at(1).samples.at(0).logprobs, miss.at(0).samples.at(0).logprobs));
}

// The same prompt again hits every full block except the one holding its last token.
TEST_F(EngineFeatures, RepeatedPromptHitsAllButTheLastBlock) {
  std::mt19937 rng(32);
  const RequestSpec spec{random_tokens(rng, 3 * kBlockSize, vocab()), params(true, 6)};
  EngineCore engine(model(), nullptr, small_engine_config(64, kBlockSize));
  OutputCollector runs;
  ASSERT_TRUE(engine.add_request(0, spec.prompt, spec.params).ok());
  run_engine(engine, runs);
  ASSERT_TRUE(engine.add_request(1, spec.prompt, spec.params).ok());
  run_engine(engine, runs);
  EXPECT_EQ(runs.runs().at(1).num_cached_tokens, 2 * kBlockSize);
  EXPECT_EQ(runs.runs().at(1).samples.at(0).token_ids, runs.runs().at(0).samples.at(0).token_ids);
  EXPECT_TRUE(same_bits(runs.runs().at(1).samples.at(0).logprobs, runs.runs().at(0).samples.at(0).logprobs));
}

// A PROMPT engine prefills and samples the first token; a COMPLETION engine on a second copy
// of the model continues from the handed-over KV. Together: the NORMAL engine's result.
// The requests through a PROMPT engine of prompt_model and a COMPLETION engine of another copy
// give what one NORMAL engine gives.
void expect_prompt_then_completion_equals_normal(CausalLM& prompt_model, CausalLM& completion_model) {
  std::mt19937 rng(41);
  std::vector<RequestSpec> requests;
  const auto vocab = static_cast<int32_t>(prompt_model.config().vocab_size);
  for (int32_t i = 0; i < 6; ++i) {
    SamplingParams p;
    p.max_tokens = 12;
    p.logprobs = 2;
    p.temperature = i % 2 == 1 ? 1.0 : 0.0;
    p.seed = static_cast<uint64_t>(60 + i);
    requests.push_back({random_tokens(rng, 10 + 9 * i, vocab), p});
  }
  const EngineConfig config = small_engine_config(64, kBlockSize);
  const auto normal = run_together(prompt_model, config, requests);

  EngineConfig prompt_config = config;
  prompt_config.mode = EngineMode::kPrompt;
  EngineConfig completion_config = config;
  completion_config.mode = EngineMode::kCompletion;
  EngineCore prompt_engine(prompt_model, nullptr, prompt_config);
  EngineCore completion_engine(completion_model, nullptr, completion_config);
  for (size_t i = 0; i < requests.size(); ++i) {
    ASSERT_TRUE(prompt_engine.add_request(static_cast<int64_t>(i), requests[i].prompt, requests[i].params).ok());
  }
  OutputCollector prefill;
  run_engine(prompt_engine, prefill);
  EXPECT_EQ(prompt_engine.stats().kv_usage, 0.0);
  std::vector<PrefilledRequest> prefilled = prompt_engine.take_prefilled();
  ASSERT_EQ(prefilled.size(), requests.size());
  for (PrefilledRequest& p : prefilled) ASSERT_TRUE(completion_engine.add_prefilled_request(std::move(p)).ok());
  OutputCollector completion;
  run_engine(completion_engine, completion);
  EXPECT_EQ(completion_engine.stats().kv_usage, 0.0);

  for (const auto& [id, want] : normal) {
    const SampleRun& first = prefill.runs().at(id).samples.at(0);
    const SampleRun& rest = completion.runs().at(id).samples.at(0);
    EXPECT_EQ(first.finish_reason, FinishReason::kPrefilled) << id;
    ASSERT_EQ(first.token_ids.size(), 1u) << id;
    // The completion engine reports the handed-over first token again, without its logprob.
    EXPECT_EQ(rest.token_ids, want.samples.at(0).token_ids) << id;
    std::vector<double> logprobs = first.logprobs;
    logprobs.insert(logprobs.end(), rest.logprobs.begin(), rest.logprobs.end());
    EXPECT_TRUE(same_bits(logprobs, want.samples.at(0).logprobs)) << id;
    EXPECT_EQ(rest.finish_reason, FinishReason::kLength) << id;
  }
}

TEST_F(EngineFeatures, PromptThenCompletionEqualsNormal) {
  TestModel second_copy = load_test_model("qwen3", /*batch_invariant=*/true);
  expect_prompt_then_completion_equals_normal(model(), *second_copy.model);
}

// Both engines with fp8 caches (--kv-cache-dtype fp8 on both workers): the handover carries the
// prompt's e4m3 KV and the completion equals one fp8 engine's run.
TEST_F(EngineFeatures, PromptThenCompletionOfAnFp8CacheEqualsNormal) {
  TestModel prompt_model = load_test_model("qwen3", true, nullptr, DType::kF8E4M3);
  TestModel completion_model = load_test_model("qwen3", true, nullptr, DType::kF8E4M3);
  ASSERT_EQ(prompt_model.model->kv_cache_dtype(), DType::kF8E4M3);
  expect_prompt_then_completion_equals_normal(*prompt_model.model, *completion_model.model);
}

// A prefilled request whose KV never arrived (kv_not_carried: a cluster's push failed) continues
// on a COMPLETION or a NORMAL engine, which computes the prompt and the delivered first token
// again and emits only what follows it: together with the PROMPT engine's first token, the NORMAL
// engine's result.
TEST_F(EngineFeatures, ContinuationWithoutKvEqualsNormal) {
  std::mt19937 rng(43);
  std::vector<RequestSpec> requests;
  for (int32_t i = 0; i < 4; ++i) {
    requests.push_back({random_tokens(rng, 12 + 11 * i, vocab()), params(i % 2 == 1, 10, 70 + i)});
  }
  const EngineConfig config = small_engine_config(64, kBlockSize);
  const auto normal = run_together(model(), config, requests);
  OutputCollector prefill;
  const std::vector<PrefilledRequest> prefilled = run_prompt_engine(config, requests, prefill);
  ASSERT_EQ(prefilled.size(), requests.size());
  for (EngineMode mode : {EngineMode::kCompletion, EngineMode::kNormal}) {
    EngineConfig continuing_config = config;
    continuing_config.mode = mode;
    EngineCore continuing(model(), nullptr, continuing_config);
    for (PrefilledRequest p : prefilled) {
      drop_kv(p);
      p.first_token_delivered = true;
      ASSERT_TRUE(continuing.add_prefilled_request(std::move(p)).ok());
    }
    OutputCollector rest;
    run_engine(continuing, rest);
    EXPECT_EQ(continuing.stats().kv_usage, 0.0);
    for (const auto& [id, want] : normal) {
      const SampleRun& after_first = rest.runs().at(id).samples.at(0);
      const SampleRun whole = joined(prefill.runs().at(id).samples.at(0), after_first);
      EXPECT_EQ(whole.token_ids, want.samples.at(0).token_ids) << id;
      EXPECT_TRUE(same_bits(whole.logprobs, want.samples.at(0).logprobs)) << id;
      EXPECT_EQ(after_first.finish_reason, FinishReason::kLength) << id;
    }
  }
}

// n > 1 disaggregated: the PROMPT engine runs sample 0 alone; the COMPLETION engine takes its KV
// and first token with all n samples, computes only the prompt's last token again (with the KV
// zeroed the samples change, so they read it), forks the other samples from it and emits sample 0
// from its second token on. With the PROMPT engine's first token: the NORMAL engine's n samples,
// bit for bit. Without the KV (kv_not_carried) the COMPLETION engine computes the prompt and gives
// the same.
TEST_F(EngineFeatures, PrefilledSamplesForkOnTheCompletionEngine) {
  constexpr int32_t kSamples = 3;
  std::mt19937 rng(47);
  std::vector<RequestSpec> requests;
  for (int32_t i = 0; i < 3; ++i) {
    RequestSpec spec{random_tokens(rng, 20 + 13 * i, vocab()), params(true, 8, 90 + i)};
    spec.params.n = kSamples;
    if (i == 2) spec.params.prompt_logprobs = 1;  // delivered with sample 0's first token, not again
    requests.push_back(spec);
  }
  const EngineConfig config = small_engine_config(64, kBlockSize);
  const auto normal = run_together(model(), config, requests);
  OutputCollector prefill;
  const std::vector<PrefilledRequest> prefilled = run_prompt_engine(config, requests, prefill);
  ASSERT_EQ(prefilled.size(), requests.size());
  TestModel second_copy = load_test_model("qwen3", /*batch_invariant=*/true);
  EngineConfig completion_config = config;
  completion_config.mode = EngineMode::kCompletion;
  // Every prefilled request with all its samples on a fresh COMPLETION engine, after `alter`.
  const auto continue_samples = [&](const std::function<void(PrefilledRequest&)>& alter) {
    EngineCore continuing(*second_copy.model, nullptr, completion_config);
    for (PrefilledRequest p : prefilled) {
      p.params.n = kSamples;
      p.first_token_delivered = true;
      alter(p);
      EXPECT_TRUE(continuing.add_prefilled_request(std::move(p)).ok());
    }
    OutputCollector rest;
    run_engine(continuing, rest);
    EXPECT_EQ(continuing.stats().kv_usage, 0.0);
    return rest;
  };
  for (const bool carried : {true, false}) {
    OutputCollector rest = continue_samples([&](PrefilledRequest& p) {
      if (!carried) drop_kv(p);
    });
    for (const auto& [id, want] : normal) {
      const RequestRun& got = rest.runs().at(id);
      EXPECT_EQ(prefill.runs().at(id).prompt_logprobs.has_value(), id == 2) << id;
      EXPECT_FALSE(got.prompt_logprobs.has_value()) << id;
      for (int32_t s = 0; s < kSamples; ++s) {
        const SampleRun& after = got.samples.at(s);
        const SampleRun whole = s == 0 ? joined(prefill.runs().at(id).samples.at(0), after) : after;
        EXPECT_EQ(whole.token_ids, want.samples.at(s).token_ids) << id << " sample " << s << " carried " << carried;
        EXPECT_TRUE(same_bits(whole.logprobs, want.samples.at(s).logprobs)) << id << " sample " << s;
        EXPECT_EQ(after.finish_reason, FinishReason::kLength) << id << " sample " << s;
      }
    }
  }
  // The samples read the pushed KV, not a prompt computed again: with it zeroed they change.
  OutputCollector zeroed =
      continue_samples([](PrefilledRequest& p) { std::fill(p.kv.begin(), p.kv.end(), uint8_t{0}); });
  int32_t changed = 0;
  for (const auto& [id, want] : normal) {
    for (int32_t s = 1; s < kSamples; ++s)
      changed += zeroed.runs().at(id).samples.at(s).token_ids != want.samples.at(s).token_ids;
  }
  EXPECT_GT(changed, 0);
}

// A COMPLETION engine given a whole request (a cluster's n > 1 request on a decode worker)
// prefills it itself: each sample equals its reference run.
TEST_F(EngineFeatures, CompletionEngineRunsWholeRequests) {
  std::mt19937 rng(45);
  RequestSpec spec{random_tokens(rng, 30, vocab()), params(true, 8, 91)};
  SamplingParams with_n = spec.params;
  with_n.n = 2;
  EngineConfig completion_config = small_engine_config(64, kBlockSize);
  completion_config.mode = EngineMode::kCompletion;
  EngineCore engine(model(), nullptr, completion_config);
  ASSERT_TRUE(engine.add_request(0, spec.prompt, with_n).ok());
  OutputCollector collector;
  run_engine(engine, collector);
  const RequestRun& run = collector.runs().at(0);
  ASSERT_EQ(run.samples.size(), 2u);
  for (const auto& [index, sample] : run.samples) {
    expect_equals_reference(spec, sample, index, "sample " + std::to_string(index));
  }
}

// n = 4 on a 40-token prompt: after the prefill step the samples share its 2 full blocks and
// each holds a copy of the partial third (6 blocks, not 12). Each sample equals a reference
// run of the request with that sample index.
TEST_F(EngineFeatures, SamplesShareThePromptAndEqualTheirReference) {
  constexpr int32_t kNumBlocks = 64;
  for (int32_t prompt_length : {40, 2 * kBlockSize}) {
    std::mt19937 rng(static_cast<uint32_t>(prompt_length));
    RequestSpec spec{random_tokens(rng, prompt_length, vocab()), params(true, 10, 77)};
    SamplingParams with_n = spec.params;
    with_n.n = 4;
    EngineCore engine(model(), nullptr, small_engine_config(kNumBlocks, kBlockSize));
    ASSERT_TRUE(engine.add_request(0, spec.prompt, with_n).ok());
    OutputCollector collector;
    collector.absorb(engine.step());
    engine.check_invariants();
    const int32_t full = prompt_length / kBlockSize;
    const int32_t partial = prompt_length % kBlockSize != 0 ? 4 : 0;
    EXPECT_NEAR(engine.stats().kv_usage * kNumBlocks, full + partial, 1e-9) << "prompt " << prompt_length;
    run_engine(engine, collector);
    EXPECT_EQ(engine.stats().kv_usage, 0.0);
    const RequestRun& run = collector.runs().at(0);
    ASSERT_EQ(run.samples.size(), 4u);
    std::set<std::vector<int32_t>> distinct;
    for (const auto& [index, sample] : run.samples) {
      distinct.insert(sample.token_ids);
      expect_equals_reference(spec, sample, index, "sample " + std::to_string(index));
    }
    EXPECT_GT(distinct.size(), 1u) << "the samples should differ by their sample index";
  }
}

// A pool of 4 blocks holds the 3-block prompt and one copy of its partial block: the third
// sample cannot fork, waits, and prefills itself later; the results do not change.
TEST_F(EngineFeatures, SamplesThatCannotForkPrefillThemselves) {
  std::mt19937 rng(51);
  RequestSpec spec{random_tokens(rng, 40, vocab()), params(true, 4, 88)};
  SamplingParams with_n = spec.params;
  with_n.n = 3;
  EngineCore engine(model(), nullptr, small_engine_config(4, kBlockSize));
  ASSERT_TRUE(engine.add_request(0, spec.prompt, with_n).ok());
  OutputCollector collector;
  collector.absorb(engine.step());
  EXPECT_EQ(collector.runs().at(0).samples.at(1).token_ids.size(), 1u);  // forked
  EXPECT_EQ(collector.runs().at(0).samples.count(2), 0u);                // no block to fork into
  run_engine(engine, collector);
  EXPECT_EQ(engine.stats().kv_usage, 0.0);
  for (const auto& [index, sample] : collector.runs().at(0).samples) {
    expect_equals_reference(spec, sample, index, "sample " + std::to_string(index));
  }
}

}  // namespace
}  // namespace deepinfer::testing
