// EngineConfig::device_sampling on a host backend: the draws go through CausalLM::forward_sampled
// and Backend::sample_rows instead of the engine's own host loop, and every token, logprob and
// finish reason stays the same (greedy, filters, logprobs, penalties, n > 1, prompt logprobs).
#include <gtest/gtest.h>

#include <random>

#include "engine_test_util.h"

namespace deepinfer::testing {
namespace {

TEST(DeviceSampling, BackendDrawsEqualHostDraws) {
  TestModel loaded = load_test_model("llama", /*batch_invariant=*/false);
  CausalLM& model = *loaded.model;
  const auto vocab = static_cast<int32_t>(model.config().vocab_size);
  std::mt19937 rng(9);
  std::vector<RequestSpec> requests;
  const auto add = [&](SamplingParams p) {
    p.max_tokens = 12;
    p.ignore_eos = true;
    p.seed = 40 + requests.size();
    requests.push_back({random_tokens(rng, 3 + static_cast<int32_t>(rng() % 40), vocab), p});
  };
  SamplingParams p;
  p.temperature = 0.8;
  p.top_p = 0.9;
  p.top_k = 40;
  add(p);
  p = {};
  p.min_p = 0.1;
  add(p);
  p = {};
  p.temperature = 0.0;
  add(p);
  p = {};
  p.logprobs = 2;
  add(p);
  p = {};
  p.frequency_penalty = 0.5;
  p.min_tokens = 4;
  add(p);
  p = {};
  p.n = 2;
  p.prompt_logprobs = 1;
  add(p);
  // Small steps: prompts are chunked, so prompt and decode rows share steps.
  EngineConfig config = small_engine_config(/*num_kv_blocks=*/128, /*block_size=*/16,
                                            /*max_num_batched_tokens=*/32);
  config.device_sampling = true;
  const auto on_backend = run_together(model, config, requests);
  config.device_sampling = false;
  const auto on_host = run_together(model, config, requests);
  expect_identical(on_backend, on_host, "backend vs host sampling");
  for (const auto& [id, run] : on_backend) {
    for (const auto& [index, sample] : run.samples) EXPECT_EQ(sample.token_ids.size(), 12u) << "request " << id;
  }
}

}  // namespace
}  // namespace deepinfer::testing
