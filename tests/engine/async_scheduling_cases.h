// The pipelined step loop's cases (EngineConfig::async_scheduling against the synchronous loop on
// the same requests), shared by the CPU tests (tests/engine/test_async_scheduling.cpp) and the GPU
// ones (tests/cuda/test_cuda_async_scheduling.cpp). Batch-invariant kernels, so a row's logits do
// not depend on the rows a pipelined step carries for sequences that finished meanwhile: the same
// tokens, logprobs, finish reasons and text, with steps really overlapped; aborts at every step
// offset, preemption under a tiny KV pool, rows the host samples, stop strings and a grammar
// through the LLM API. Each case takes a model loaded batch-invariant (or the device to open the
// text model on).
#pragma once

#include <gtest/gtest.h>

#include <functional>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "deepinfer/llm.h"
#include "engine_test_util.h"
#include "text_model_dir.h"

namespace deepinfer::testing::async_cases {

inline std::vector<RequestSpec> mixed_requests(int32_t vocab, const std::vector<int32_t>& stop_ids) {
  std::mt19937 rng(31);
  std::vector<RequestSpec> requests;
  const auto add = [&](SamplingParams p, int32_t max_tokens) {
    p.max_tokens = max_tokens;
    p.seed = 70 + requests.size();
    requests.push_back({random_tokens(rng, 3 + static_cast<int32_t>(rng() % 37), vocab), p});
  };
  SamplingParams greedy;
  greedy.temperature = 0.0;
  greedy.ignore_eos = true;
  for (int32_t max_tokens : {1, 2, 5, 17, 30}) add(greedy, max_tokens);
  SamplingParams sampled;
  sampled.temperature = 0.8;
  sampled.top_p = 0.9;
  sampled.top_k = 40;
  sampled.ignore_eos = true;
  add(sampled, 25);
  SamplingParams stops = greedy;  // ends on a token its unstopped run draws mid-way
  stops.stop_token_ids = stop_ids;
  add(stops, 30);
  SamplingParams two = sampled;
  two.n = 2;
  add(two, 12);
  SamplingParams logprobs = greedy;  // drawn on the backend, its rows copied for the logprobs
  logprobs.logprobs = 2;
  add(logprobs, 9);
  SamplingParams penalized = sampled;  // sampled on the host: its steps are not continued
  penalized.frequency_penalty = 0.5;
  penalized.min_tokens = 4;
  add(penalized, 11);
  return requests;
}

// count requests, greedy and sampled (temperature 0.8, a seed each) in turn, request i with a
// prompt of first_prompt + i * prompt_step random tokens and max_tokens(i) tokens to generate.
inline std::vector<RequestSpec> alternating_requests(int32_t vocab, uint32_t seed, int count, int first_prompt,
                                                     int prompt_step, const std::function<int32_t(int)>& max_tokens) {
  std::mt19937 rng(seed);
  std::vector<RequestSpec> requests;
  for (int i = 0; i < count; ++i) {
    SamplingParams params;
    params.temperature = i % 2 == 0 ? 0.0 : 0.8;
    params.seed = seed * 100 + static_cast<uint32_t>(i);
    params.ignore_eos = true;
    params.max_tokens = max_tokens(i);
    requests.push_back({random_tokens(rng, first_prompt + i * prompt_step, vocab), params});
  }
  return requests;
}

// The byte-tokenizer text model through the LLM API on device, batch-invariant, in either loop.
inline std::unique_ptr<LLM> open_text_llm(const TextModelDir& dir, bool pipelined, const std::string& device) {
  LLMConfig config;
  config.model_dir = dir.path();
  config.device = device;
  config.batch_invariant = true;
  config.show_progress = false;
  config.kv_cache_bytes = int64_t{16} << 20;
  config.async_scheduling = pipelined;
  return std::move(LLM::open(config).value());
}

// Each prompt's first sample: the same tokens, text, finish and stop reasons in both loops.
inline void expect_same_samples(const std::vector<GenerationResult>& got, const std::vector<GenerationResult>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    const SampleResult& w = want[i].outputs.at(0);
    const SampleResult& g = got[i].outputs.at(0);
    EXPECT_EQ(g.token_ids, w.token_ids) << "prompt " << i;
    EXPECT_EQ(g.text, w.text) << "prompt " << i;
    EXPECT_EQ(g.finish_reason, w.finish_reason) << "prompt " << i;
    EXPECT_EQ(g.stop_reason, w.stop_reason) << "prompt " << i;
  }
}

inline EngineConfig pipelined(EngineConfig config, bool on) {
  config.async_scheduling = on;
  return config;
}

struct BothLoops {
  EngineStats sync_stats;
  EngineStats async_stats;
  std::map<int64_t, RequestRun> async_runs;
};

// The requests through the synchronous and the pipelined loop: the same outputs, bit for bit.
inline BothLoops expect_same_in_both_loops(CausalLM& model, const EngineConfig& config,
                                           const std::vector<RequestSpec>& requests, const std::string& what) {
  BothLoops both;
  const auto sync_runs = run_together(model, pipelined(config, false), requests, &both.sync_stats);
  both.async_runs = run_together(model, pipelined(config, true), requests, &both.async_stats);
  expect_identical(both.async_runs, sync_runs, what);
  return both;
}

inline void same_tokens_as_the_synchronous_loop(CausalLM& model) {
  const auto vocab = static_cast<int32_t>(model.config().vocab_size);
  // A stop id: the 8th token the stop request draws when nothing stops it.
  std::vector<RequestSpec> probe = mixed_requests(vocab, {});
  // Small steps: prompts are chunked, so prompt and decode rows share steps.
  const EngineConfig config = small_engine_config(/*num_kv_blocks=*/128, /*block_size=*/16,
                                                  /*max_num_batched_tokens=*/48);
  const auto unstopped = run_together(model, config, {probe[6]});
  ASSERT_GE(unstopped.at(0).samples.at(0).token_ids.size(), 8u);
  const std::vector<RequestSpec> requests = mixed_requests(vocab, {unstopped.at(0).samples.at(0).token_ids[7]});

  const BothLoops both = expect_same_in_both_loops(model, config, requests, "pipelined vs synchronous");
  EXPECT_EQ(both.sync_stats.num_overlapped_steps, 0);
  EXPECT_GT(both.async_stats.num_overlapped_steps, 10);
  EXPECT_EQ(both.async_runs.at(6).samples.at(0).finish_reason, FinishReason::kStop);
  EXPECT_LE(both.async_runs.at(6).samples.at(0).token_ids.size(), 8u);
}

// More requests than seats: while every seat is taken the waiting ones cannot be admitted, so
// the running ones keep pipelining; each admission waits for a synchronous step.
inline void more_requests_than_seats(CausalLM& model) {
  const std::vector<RequestSpec> requests =
      alternating_requests(static_cast<int32_t>(model.config().vocab_size), 12, 10, 5, 1, [](int i) { return 8 + 3 * (i % 4); });
  const EngineConfig config = small_engine_config(/*num_kv_blocks=*/64, /*block_size=*/16,
                                                  /*max_num_batched_tokens=*/2048, /*max_num_seqs=*/3);
  const BothLoops both = expect_same_in_both_loops(model, config, requests, "pipelined vs synchronous, 3 seats");
  EXPECT_GT(both.async_stats.num_overlapped_steps, 20);
}

// Requests arriving while steps run: a free seat makes the next step admit them, scheduled
// while the step before is still running (its sequences' tokens pending).
inline void arrivals_join_while_steps_run(CausalLM& model) {
  const std::vector<RequestSpec> requests =
      alternating_requests(static_cast<int32_t>(model.config().vocab_size), 21, 6, 4, 7, [](int i) { return 6 + 2 * i; });
  // Small steps: long prompts are chunked across steps that also decode.
  const EngineConfig config = small_engine_config(/*num_kv_blocks=*/64, /*block_size=*/16,
                                                  /*max_num_batched_tokens=*/24);
  std::map<int64_t, RequestRun> runs[2];
  EngineStats stats[2];
  for (bool on : {false, true}) {
    EngineCore engine(model, nullptr, pipelined(config, on));
    OutputCollector collector;
    size_t next = 0;
    run_engine(engine, collector, [&](int64_t step) {
      // Two at once, then one every third step.
      while (next < requests.size() && (step == 0 ? next < 2 : step % 3 == 0 && next < 2 + static_cast<size_t>(step / 3))) {
        ASSERT_TRUE(engine.add_request(static_cast<int64_t>(next), requests[next].prompt, requests[next].params).ok());
        ++next;
      }
    });
    EXPECT_EQ(next, requests.size());
    runs[on ? 1 : 0] = std::move(collector.runs());
    stats[on ? 1 : 0] = engine.stats();
  }
  expect_identical(runs[1], runs[0], "arrivals, pipelined vs synchronous");
  EXPECT_GT(stats[1].num_overlapped_steps, 10);
}

// Rows the host samples (penalties, min_tokens) sit out each step scheduled ahead and run every
// other step; the rest keep pipelining beside them, with the synchronous loop's tokens.
inline void host_sampled_rows_sit_out_while_others_pipeline(CausalLM& model) {
  std::vector<RequestSpec> requests =
      alternating_requests(static_cast<int32_t>(model.config().vocab_size), 41, 6, 5, 3, [](int) { return 24; });
  requests[1].params.frequency_penalty = 0.7;
  requests[4].params.presence_penalty = 0.5;
  requests[4].params.min_tokens = 20;
  const EngineConfig config = small_engine_config(/*num_kv_blocks=*/64);
  const BothLoops both = expect_same_in_both_loops(model, config, requests, "host-sampled rows, pipelined vs synchronous");
  // Every step has a host-sampled row in it; without sitting out, none would be overlapped.
  EXPECT_GT(both.async_stats.num_overlapped_steps, 20);
}

// Request 1 is aborted before step `offset`; what every request streamed up to then and after is
// the same in both loops, and nothing arrives after a finish (OutputCollector checks).
inline void aborts_at_every_step_offset(CausalLM& model) {
  const auto vocab = static_cast<int32_t>(model.config().vocab_size);
  std::mt19937 rng(5);
  SamplingParams params;
  params.temperature = 0.0;
  params.ignore_eos = true;
  params.max_tokens = 10;
  const std::vector<RequestSpec> requests = {{random_tokens(rng, 9, vocab), params},
                                             {random_tokens(rng, 14, vocab), params},
                                             {random_tokens(rng, 4, vocab), params}};
  const EngineConfig config = small_engine_config(/*num_kv_blocks=*/64);
  for (int64_t offset = 0; offset <= 12; ++offset) {
    std::map<int64_t, RequestRun> runs[2];
    for (bool on : {false, true}) {
      EngineCore engine(model, nullptr, pipelined(config, on));
      for (size_t i = 0; i < requests.size(); ++i) {
        ASSERT_TRUE(engine.add_request(static_cast<int64_t>(i), requests[i].prompt, requests[i].params).ok());
      }
      OutputCollector collector;
      run_engine(engine, collector, [&](int64_t step) {
        if (step == offset) engine.abort_request(1);
      });
      runs[on ? 1 : 0] = std::move(collector.runs());
    }
    expect_identical(runs[1], runs[0], "abort before step " + std::to_string(offset));
  }
}

inline void preemption_under_a_tiny_kv_pool(CausalLM& model) {
  const std::vector<RequestSpec> requests =
      alternating_requests(static_cast<int32_t>(model.config().vocab_size), 8, 6, 6, 3, [](int) { return 20; });
  // 12 blocks of 8 tokens for six sequences of up to 41 tokens: running ones get preempted.
  const EngineConfig config = small_engine_config(/*num_kv_blocks=*/12, /*block_size=*/8);
  const BothLoops both = expect_same_in_both_loops(model, config, requests, "pipelined vs synchronous, preempting");
  EXPECT_GT(both.sync_stats.num_preemptions, 0);
  EXPECT_GT(both.async_stats.num_overlapped_steps, 0);
}

// Text, stop strings (one of them completed by a token that a pipelined step already ran past)
// and finish reasons through the LLM API on a model with a byte tokenizer.
inline void stop_strings_and_text_through_the_llm(const std::string& device) {
  TextModelDir dir{/*with_chat_template=*/false};
  std::vector<GenerationResult> results[2];
  // Prompts whose greedy outputs write at least 21 bytes of text in 24 tokens on this model.
  const std::vector<Prompt> prompts = {Prompt{"The quick brown fox", {}}, Prompt{"Hello", {}}, Prompt{"abc", {}},
                                       Prompt{"Once upon a time", {}}};
  SamplingParams params;
  params.temperature = 0.0;
  params.ignore_eos = true;
  params.max_tokens = 24;
  for (bool on : {false, true}) {
    auto llm = open_text_llm(dir, on, device);
    auto base = llm->generate(prompts, {params});
    ASSERT_TRUE(base.ok()) << base.error().message;
    // Stop strings cut from the unstopped outputs, mid-way.
    std::vector<SamplingParams> stopped(prompts.size(), params);
    for (size_t i = 0; i < prompts.size(); ++i) {
      const std::string& text = base->at(i).outputs.at(0).text;
      ASSERT_GE(text.size(), 12u) << "prompt " << i;
      stopped[i].stop = {text.substr(6 + 2 * i, 3)};
    }
    auto out = llm->generate(prompts, stopped);
    ASSERT_TRUE(out.ok()) << out.error().message;
    results[on ? 1 : 0] = std::move(*out);
  }
  expect_same_samples(results[1], results[0]);
  for (size_t i = 0; i < prompts.size(); ++i) EXPECT_EQ(results[1].at(i).outputs.at(0).finish_reason, "stop") << i;
}

// A request constrained by a grammar (sampled on the host: steps after its rows are scheduled
// only once they are processed) among free ones: the same outputs, the constraint kept.
inline void grammar_request_among_free_ones(const std::string& device) {
  TextModelDir dir{/*with_chat_template=*/false};
  const std::vector<Prompt> prompts = {Prompt{"The quick brown fox", {}}, Prompt{"Hello", {}},
                                       Prompt{"abc", {}}};
  SamplingParams free;
  free.temperature = 0.0;
  free.ignore_eos = true;
  free.max_tokens = 16;
  SamplingParams constrained = free;
  StructuredOutputParams regex;
  regex.kind = StructuredOutputParams::Kind::kRegex;
  regex.spec = "[a-f]{3}-[0-9]{4}";
  constrained.structured_output = regex;
  const std::vector<SamplingParams> params = {free, constrained, free};
  std::vector<GenerationResult> results[2];
  for (bool on : {false, true}) {
    auto llm = open_text_llm(dir, on, device);
    auto out = llm->generate(prompts, params);
    ASSERT_TRUE(out.ok()) << out.error().message;
    results[on ? 1 : 0] = std::move(*out);
  }
  expect_same_samples(results[1], results[0]);
  EXPECT_EQ(results[1].at(1).outputs.at(0).text.size(), 8u) << results[1].at(1).outputs.at(0).text;
}

}  // namespace deepinfer::testing::async_cases
