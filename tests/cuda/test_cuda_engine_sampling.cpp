// Sampling on the device inside the model and the engine: CausalLM::forward_sampled on CUDA (eager
// and from replayed decode graphs) against forward() plus the host sampler, and seeded engine runs
// whose tokens must not depend on EngineConfig::device_sampling (host rows for logprobs,
// penalties and n > 1 forks included). The pipelined loop's device side: a step enqueued before
// the one ahead of it finished takes that step's draws on the device (token_from_draw); the
// engine-level cases are in test_cuda_async_scheduling.cpp.
#include <gtest/gtest.h>

#include <cstring>
#include <random>

#include "../engine/engine_test_util.h"
#include "bf16_model.h"
#include "cuda_test_util.h"

namespace deepinfer::testing {
namespace {

// batch sequences of one token each at position `position` (a decode step the graphs take).
ForwardBatch decode_batch(int32_t batch, int32_t position, std::mt19937& rng, int32_t vocab) {
  constexpr int32_t kBlockSize = 16;
  constexpr int32_t kBlocksPerSeq = 4;
  ForwardBatch fb;
  fb.max_blocks_per_seq = kBlocksPerSeq;
  std::uniform_int_distribution<int32_t> pick(0, vocab - 1);
  for (int32_t s = 0; s < batch; ++s) {
    fb.token_ids.push_back(pick(rng));
    fb.positions.push_back(position);
    fb.slot_mapping.push_back((s * kBlocksPerSeq + position / kBlockSize) * kBlockSize + position % kBlockSize);
    fb.query_start.push_back(s);
    fb.seq_len.push_back(position + 1);
    fb.logit_rows.push_back(s);
    for (int32_t b = 0; b < kBlocksPerSeq; ++b) fb.block_table.push_back(s * kBlocksPerSeq + b);
  }
  fb.query_start.push_back(batch);
  return fb;
}

TEST(CudaDeviceSampling, ForwardSampledEqualsForwardThenHostSampler) {
  CudaModel loaded = load_on_cuda(write_bf16_copy(fixture_dir("llama"), "llama"));
  CausalLM& model = *loaded.model;
  const auto vocab = static_cast<int32_t>(model.config().vocab_size);
  model.allocate_kv_cache(KvCacheShape{64, 16});
  std::mt19937 rng(3);
  const int32_t batch = 6;
  SamplingParams params;
  params.temperature = 0.9;
  params.top_p = 0.9;
  params.top_k = 30;
  // Each position twice: the first step of a shape runs eagerly, later ones replay its graph.
  for (int32_t position = 0; position < 6; ++position) {
    const ForwardBatch fb = decode_batch(batch, position / 2, rng, vocab);
    std::vector<kernels::SampleParams> draws;
    for (int32_t s = 0; s < batch; ++s) {
      SamplingParams p = params;
      if (s == 1) p.temperature = 0.0;
      if (s == 2) p.min_p = 0.1;
      draws.push_back(sample_params(p, 17, position, s % 2, s));
    }
    draws.push_back(sample_params(params, 18, position, 1, 4));  // a second draw from row 4
    std::vector<float> want_logits(static_cast<size_t>(batch) * static_cast<size_t>(vocab));
    model.forward(fb, want_logits.data());
    std::vector<int32_t> want(draws.size());
    kernels::cpu::sample_rows(want_logits.data(), vocab, draws.data(), static_cast<int64_t>(draws.size()), want.data());

    const std::vector<int32_t> host_rows = {0, 2, 3, 5};
    std::vector<float> got_logits(want_logits.size(), -1.0f);
    std::vector<int32_t> got(draws.size(), -1);
    model.forward_sampled(fb, draws, got.data(), host_rows, got_logits.data());
    EXPECT_EQ(got, want) << "position " << position;
    for (size_t i = 0; i < host_rows.size(); ++i) {  // host_logits holds the host rows in order
      const size_t offset = static_cast<size_t>(host_rows[i]) * static_cast<size_t>(vocab);
      EXPECT_EQ(std::memcmp(got_logits.data() + i * static_cast<size_t>(vocab), want_logits.data() + offset,
                            sizeof(float) * vocab),
                0)
          << "host row " << host_rows[i] << " position " << position;
    }
  }
  EXPECT_GT(model.num_graph_replays(), 0);
}

TEST(CudaDeviceSampling, EngineTokensDoNotDependOnWhereTheySample) {
  CudaModel loaded = load_on_cuda(write_bf16_copy(fixture_dir("llama"), "llama"));
  CausalLM& model = *loaded.model;
  const auto vocab = static_cast<int32_t>(model.config().vocab_size);
  std::mt19937 rng(5);
  std::vector<RequestSpec> requests;
  const auto add = [&](SamplingParams p) {
    p.max_tokens = 20;
    p.ignore_eos = true;
    p.seed = 100 + requests.size();
    requests.push_back({random_tokens(rng, 5 + static_cast<int32_t>(rng() % 30), vocab), p});
  };
  SamplingParams p;
  p.temperature = 0.9;
  p.top_p = 0.9;
  add(p);
  p = {};
  p.temperature = 1.2;
  p.top_k = 20;
  p.min_p = 0.05;
  add(p);
  p = {};
  p.temperature = 0.7;  // every token a candidate
  add(p);
  p = {};
  p.temperature = 0.0;
  add(p);
  p = {};
  p.logprobs = 3;  // host rows
  p.top_p = 0.8;
  add(p);
  p = {};
  p.repetition_penalty = 1.3;
  add(p);
  p = {};
  p.n = 3;  // forks from sample 0's first row on the host, then draws on the device
  p.top_p = 0.95;
  add(p);
  EngineConfig config = small_engine_config(/*num_kv_blocks=*/256);
  config.device_sampling = true;
  const auto on_device = run_together(model, config, requests);
  config.device_sampling = false;
  const auto on_host = run_together(model, config, requests);
  expect_identical(on_device, on_host, "device vs host sampling");
  for (const auto& [id, run] : on_device) {
    for (const auto& [index, sample] : run.samples) EXPECT_EQ(sample.token_ids.size(), 20u) << "request " << id;
  }
  EXPECT_GT(model.num_graph_replays(), 0);
}

// Step two is launched before step one is waited for, its tokens standing as -1 and taken from
// step one's draws in a shuffled order: the same draws and logits as when the host supplies them,
// at positions whose steps run eagerly (the first of a graph shape) and from replayed graphs.
TEST(CudaDeviceSampling, NextStepTakesTheDrawsOnTheDevice) {
  CudaModel loaded = load_on_cuda(write_bf16_copy(fixture_dir("llama"), "llama"));
  CausalLM& model = *loaded.model;
  const auto vocab = static_cast<int32_t>(model.config().vocab_size);
  const int32_t batch = 5;
  const std::vector<int32_t> draw_of_seq = {3, 0, 4, 1, 2};
  const std::vector<int32_t> host_rows = {1, 4};
  struct Steps {
    std::vector<int32_t> first, second;
    std::vector<float> second_logits;
  };
  for (int32_t position = 0; position < 6; position += 2) {
    std::mt19937 rng(11 + position);
    const ForwardBatch first = decode_batch(batch, position, rng, vocab);
    std::vector<kernels::SampleParams> draws;
    SamplingParams params;
    params.temperature = 0.8;
    params.top_k = 40;
    for (int32_t s = 0; s < batch; ++s) draws.push_back(sample_params(params, 5, position, s, s));
    const auto run = [&](bool pipelined) {
      model.allocate_kv_cache(KvCacheShape{64, 16});
      Steps steps;
      steps.first.assign(draws.size(), -1);
      steps.second.assign(draws.size(), -1);
      steps.second_logits.assign(host_rows.size() * static_cast<size_t>(vocab), 0.0f);
      std::vector<float> first_logits;
      ForwardBatch second = decode_batch(batch, position + 1, rng, vocab);
      if (pipelined) {
        second.token_from_draw = draw_of_seq;
        std::fill(second.token_ids.begin(), second.token_ids.end(), -1);
        auto one = model.launch_sampled(first, draws, steps.first.data(), {}, first_logits.data());
        auto two = model.launch_sampled(second, draws, steps.second.data(), host_rows, steps.second_logits.data());
        two->wait();
        one->wait();
      } else {
        model.forward_sampled(first, draws, steps.first.data(), {}, first_logits.data());
        for (size_t s = 0; s < draw_of_seq.size(); ++s) {
          second.token_ids[s] = steps.first[static_cast<size_t>(draw_of_seq[s])];
        }
        model.forward_sampled(second, draws, steps.second.data(), host_rows, steps.second_logits.data());
      }
      return steps;
    };
    const Steps want = run(false);
    const Steps got = run(true);
    EXPECT_EQ(got.first, want.first) << "position " << position;
    EXPECT_EQ(got.second, want.second) << "position " << position;
    EXPECT_EQ(std::memcmp(got.second_logits.data(), want.second_logits.data(),
                          sizeof(float) * want.second_logits.size()),
              0)
        << "host rows, position " << position;
  }
  EXPECT_GT(model.num_graph_replays(), 0);
}

}  // namespace
}  // namespace deepinfer::testing
