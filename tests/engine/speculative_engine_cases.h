// The engine's speculative decoding on the shipped default model (its MTP module and confidence
// head), run by the CPU tests (test_speculative_engine.cpp) and the CUDA ones
// (tests/cuda/test_cuda_speculative_engine.cpp), in batch-invariant mode: each verify row is then
// computed as a one-row decode step computes it, so the oracle is the same engine without drafts,
// token for token and logprob for logprob.
#pragma once

#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "engine/engine_core.h"
#include "engine_test_util.h"
#include "tokenizer/tokenizer.h"

namespace deepinfer::testing {

inline std::string speculative_model_dir() {
  return std::string(DEEPINFER_TEST_DATA_DIR) + "/../../models/deepinfer-tiny-v3";
}

// Step-time curves for tests: flat, so verifying every draft always pays and drafting does too.
inline SpeculativeConfig speculative_config(int32_t k, bool varlen) {
  SpeculativeConfig spec;
  spec.num_tokens = k;
  spec.varlen = varlen;
  spec.decode_curve = {{1, 1.0}, {4096, 1.0}};
  spec.verify_curve = {{1, 1.0}, {4096, 1.0}};
  spec.draft_curve = {{1, 0.01}, {4096, 0.01}};
  return spec;
}

struct SpeculativeRun {
  std::map<int64_t, RequestRun> runs;
  EngineStats stats;
};

inline SpeculativeRun run_requests(CausalLM& model, const Tokenizer& tokenizer, EngineConfig config,
                                   const std::vector<RequestSpec>& requests) {
  EngineCore engine(model, &tokenizer, config);
  for (size_t i = 0; i < requests.size(); ++i) {
    auto added = engine.add_request(static_cast<int64_t>(i), requests[i].prompt, requests[i].params);
    EXPECT_TRUE(added.ok()) << added.error().message;
  }
  OutputCollector collector;
  run_engine(engine, collector);
  return {std::move(collector.runs()), engine.stats()};
}

inline std::vector<int32_t> encode(const Tokenizer& tokenizer, const std::string& text) {
  auto encoded = tokenizer.encode(text);
  EXPECT_TRUE(encoded.ok()) << encoded.error().message;
  return encoded.ok() ? *encoded : std::vector<int32_t>{};
}

// Code prompts the MTP module drafts well on, each request with its own sampling.
inline std::vector<RequestSpec> speculative_requests(const Tokenizer& tokenizer) {
  std::vector<RequestSpec> requests;
  const char* texts[] = {"def fibonacci(n):\n    if n < 2:\n        return n\n",
                         "import os\nimport sys\n\n\nclass Config:\n    def __init__(self, path):\n",
                         "for i in range(10):\n    print(", "def add(a, b):\n    return"};
  for (int i = 0; i < 4; ++i) {
    RequestSpec spec;
    spec.prompt = encode(tokenizer, texts[i]);
    spec.params.max_tokens = 40;
    spec.params.ignore_eos = true;
    if (i == 0) spec.params.temperature = 0.0;
    if (i == 1) {  // sampled, two samples, logprobs
      spec.params.temperature = 0.8;
      spec.params.top_p = 0.95;
      spec.params.seed = 11;
      spec.params.n = 2;
      spec.params.logprobs = 2;
    }
    if (i == 2) {  // a penalty (host-sampled rows) and a stop string inside an accepted run
      spec.params.temperature = 0.0;
      spec.params.repetition_penalty = 1.1;
      spec.params.stop = {")\n"};
    }
    if (i == 3) {  // greedy, max_tokens reached inside an accepted run
      spec.params.temperature = 0.0;
      spec.params.max_tokens = 7;
    }
    requests.push_back(spec);
  }
  // Structured output: drafts the grammar rejects end the chain; masks at every verified row.
  RequestSpec constrained;
  constrained.prompt = encode(tokenizer, "x = [");
  constrained.params.max_tokens = 24;
  constrained.params.temperature = 0.0;
  StructuredOutputParams regex;
  regex.kind = StructuredOutputParams::Kind::kRegex;
  regex.spec = "[0-9]+(, [0-9]+)*\\]";
  constrained.params.structured_output = regex;
  requests.push_back(constrained);
  return requests;
}

inline void expect_same_text(const std::map<int64_t, RequestRun>& got, const std::map<int64_t, RequestRun>& want,
                             const std::string& what) {
  expect_identical(got, want, what);
  for (const auto& [id, run] : want) {
    for (const auto& [index, sample] : run.samples) {
      const SampleRun& g = got.at(id).samples.at(index);
      EXPECT_EQ(g.text, sample.text) << what << ", request " << id << " sample " << index;
      EXPECT_EQ(g.stop_reason, sample.stop_reason) << what << ", request " << id << " sample " << index;
    }
  }
}

// With drafts, every request's output is the output without them, token for token, at K = 1 and
// 3, varlen and fixed K, and under preemption (a KV pool too small for every request at once);
// drafts are verified and most are kept on code.
inline void expect_speculation_keeps_output(CausalLM& model) {
  auto tokenizer = Tokenizer::load(speculative_model_dir());
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.error().message;
  const std::vector<RequestSpec> requests = speculative_requests(*tokenizer);
  for (int32_t num_blocks : {256, 8}) {
    const EngineConfig plain = small_engine_config(num_blocks);
    const SpeculativeRun want = run_requests(model, *tokenizer, plain, requests);
    for (int32_t k : {1, 3}) {
      for (bool varlen : {true, false}) {
        EngineConfig config = plain;
        config.speculative = speculative_config(k, varlen);
        const SpeculativeRun got = run_requests(model, *tokenizer, config, requests);
        const std::string what = "K = " + std::to_string(k) + (varlen ? ", varlen" : ", fixed") + ", " +
                                 std::to_string(num_blocks) + " blocks";
        expect_same_text(got.runs, want.runs, what);
        ASSERT_TRUE(got.stats.speculative.has_value());
        const SpeculativeStats& stats = *got.stats.speculative;
        EXPECT_GT(stats.verify_steps, 0) << what;
        ASSERT_EQ(stats.proposed_per_position.size(), static_cast<size_t>(k));
        EXPECT_GT(stats.accepted_per_position[0], stats.proposed_per_position[0] * 2 / 5) << what;
        // Every verification had a first draft; its kept drafts are counted at each position.
        int64_t verifications = 0;
        int64_t kept = 0;
        for (size_t a = 0; a < stats.accepted_length.size(); ++a) {
          verifications += stats.accepted_length[a];
          kept += static_cast<int64_t>(a) * stats.accepted_length[a];
        }
        EXPECT_EQ(stats.proposed_per_position[0], verifications) << what;
        int64_t kept_per_position = 0;
        for (int64_t count : stats.accepted_per_position) kept_per_position += count;
        EXPECT_EQ(kept, kept_per_position) << what;
        if (num_blocks == 8) {
          EXPECT_GT(got.stats.num_preemptions, 0) << what;
        }
      }
    }
  }
}

// Replayed drafts (a plain run's outputs, every other one corrupted) on a model without a draft
// module: the output stays plain decoding's, and exactly the uncorrupted drafts are kept. Returns
// the graph replays of the speculative run (its verify steps' when they are decode-shaped).
inline int64_t expect_replayed_drafts_keep_output(CausalLM& model) {
  std::vector<RequestSpec> requests;
  for (int i = 0; i < 3; ++i) {
    RequestSpec spec;
    spec.prompt = {5 + i, 17, 42, 7, 99, 3};
    spec.params.max_tokens = 24;
    spec.params.ignore_eos = true;
    spec.params.temperature = 0.0;
    requests.push_back(spec);
  }
  const EngineConfig plain = small_engine_config(64);
  const std::map<int64_t, RequestRun> want = run_together(model, plain, requests);
  EngineConfig config = plain;
  config.speculative = speculative_config(3, false);
  int64_t offered = 0;
  int64_t corrupted = 0;
  const auto vocab = static_cast<int32_t>(model.config().vocab_size);
  config.speculative.draft_source = [&](const Request& r, int32_t max_drafts, std::vector<int32_t>& drafts,
                                        std::vector<float>& confidences) {
    const std::vector<int32_t>& reference = want.at(r.request_id).samples.at(0).token_ids;
    for (int32_t j = 0; j < max_drafts; ++j) {
      const auto generated = static_cast<size_t>(r.num_output_tokens() + j);
      const bool corrupt = (r.num_tokens() + j) % 2 == 0;
      drafts.push_back(corrupt ? (reference[generated] + 1) % vocab : reference[generated]);
      confidences.push_back(0.5f);
      ++offered;
      if (corrupt && j == 0) ++corrupted;
    }
  };
  EngineStats stats;
  const int64_t replays_before = model.num_graph_replays();
  const std::map<int64_t, RequestRun> got = run_together(model, config, requests, &stats);
  const int64_t replays = model.num_graph_replays() - replays_before;
  expect_identical(got, want, "replayed drafts");
  EXPECT_TRUE(stats.speculative.has_value());
  if (!stats.speculative.has_value()) return replays;
  EXPECT_GT(offered, 0);
  // A first draft is kept exactly when it was not corrupted.
  EXPECT_EQ(stats.speculative->proposed_per_position[0] - stats.speculative->accepted_per_position[0], corrupted);
  EXPECT_EQ(stats.speculative->draft_calls, 0);
  return replays;
}

}  // namespace deepinfer::testing
