// Helpers for the engine tests: loading the fixture models, driving an EngineCore to the end
// while checking its invariants after every step, collecting what each sample produced, and a
// one-sequence reference run of the model that sidesteps the scheduler and the KV manager.
#pragma once

#include <gtest/gtest.h>
#include <omp.h>

#include <bit>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "engine/engine_core.h"
#include "fixture_dir.h"
#include "model/model.h"
#include "sampling/logits_processor.h"
#include "sampling/logprobs.h"
#include "sampling/sampler.h"

namespace deepinfer::testing {

// Sets the OpenMP thread count for a scope. The engine tests run on one thread (threads.cpp)
// unless a test asks for more: on a busy 2-core machine, OpenMP barriers between the tiny
// fixtures' kernels cost more than the work.
class ScopedThreads {
 public:
  explicit ScopedThreads(int num_threads) : previous_(omp_get_max_threads()) { omp_set_num_threads(num_threads); }
  ~ScopedThreads() { omp_set_num_threads(previous_); }
  ScopedThreads(const ScopedThreads&) = delete;
  ScopedThreads& operator=(const ScopedThreads&) = delete;

 private:
  int previous_;
};

struct TestModel {
  std::unique_ptr<Backend> backend;
  std::unique_ptr<CausalLM> model;
};

using BackendWrapper = std::function<std::unique_ptr<Backend>(std::unique_ptr<Backend>)>;

// dir: a fixture name under tests/data or a model directory. wrap, if given, wraps the CPU
// backend the model runs on; kv_cache_dtype is BackendOptions'.
inline TestModel load_test_model(const std::string& dir, bool batch_invariant, const BackendWrapper& wrap = nullptr,
                                 std::optional<DType> kv_cache_dtype = std::nullopt) {
  TestModel loaded;
  BackendOptions options;
  options.batch_invariant = batch_invariant;
  options.kv_cache_dtype = kv_cache_dtype;
  loaded.backend = std::move(make_backend("cpu", options).value());
  if (wrap) loaded.backend = wrap(std::move(loaded.backend));
  const std::string path = dir.find('/') == std::string::npos ? fixture_dir(dir) : dir;
  auto model = load_model(path, *loaded.backend, /*show_progress=*/false);
  if (!model.ok()) ADD_FAILURE() << model.error().message;
  loaded.model = std::move(*model);
  return loaded;
}

inline EngineConfig small_engine_config(int32_t num_kv_blocks, int32_t block_size = 16,
                                        int32_t max_num_batched_tokens = 2048, int32_t max_num_seqs = 64) {
  EngineConfig config;
  config.block_size = block_size;
  config.num_kv_blocks = num_kv_blocks;
  config.scheduler.max_num_batched_tokens = max_num_batched_tokens;
  config.scheduler.max_num_seqs = max_num_seqs;
  return config;
}

// Everything one sample produced, accumulated over the steps.
struct SampleRun {
  std::vector<int32_t> token_ids;
  std::vector<double> logprobs;                              // of the chosen tokens
  std::vector<std::vector<std::pair<int32_t, double>>> top;  // top logprobs per token
  std::string text;
  bool finished = false;
  int32_t num_finish_reports = 0;
  FinishReason finish_reason = FinishReason::kNone;
  std::string stop_reason;
};

struct RequestRun {
  std::map<int32_t, SampleRun> samples;  // by sample index
  int32_t num_prompt_tokens = 0;
  int32_t num_cached_tokens = 0;
  std::optional<std::vector<std::optional<TokenLogprob>>> prompt_logprobs;
  bool finished = false;
};

// Folds step outputs into per-request runs; flags an output that arrives after its sample or
// request finished.
class OutputCollector {
 public:
  void absorb(const std::vector<RequestOutput>& outputs) {
    for (const RequestOutput& out : outputs) {
      RequestRun& run = runs_[out.request_id];
      EXPECT_FALSE(run.finished) << "request " << out.request_id << " reported after it finished";
      run.num_prompt_tokens = out.num_prompt_tokens;
      run.num_cached_tokens = out.num_cached_tokens;
      if (out.prompt_logprobs) run.prompt_logprobs = out.prompt_logprobs;
      for (const SampleOutput& s : out.samples) {
        SampleRun& sample = run.samples[s.index];
        EXPECT_FALSE(sample.finished && !s.new_token_ids.empty())
            << "request " << out.request_id << " sample " << s.index << " got tokens after it finished";
        sample.token_ids.insert(sample.token_ids.end(), s.new_token_ids.begin(), s.new_token_ids.end());
        for (const TokenLogprob& lp : s.new_logprobs) {
          sample.logprobs.push_back(lp.logprob);
          sample.top.push_back(lp.top);
        }
        sample.text += s.new_text;
        if (s.finished) {
          sample.finished = true;
          ++sample.num_finish_reports;
          sample.finish_reason = s.finish_reason;
          sample.stop_reason = s.stop_reason;
        }
      }
      if (out.finished) run.finished = true;
    }
  }
  std::map<int64_t, RequestRun>& runs() { return runs_; }

 private:
  std::map<int64_t, RequestRun> runs_;
};

// Steps until the engine is idle, checking the KV bookkeeping after every step. before_step(i)
// runs ahead of step i (add or abort requests there). Returns the number of steps.
inline int64_t run_engine(EngineCore& engine, OutputCollector& collector,
                          const std::function<void(int64_t)>& before_step = nullptr, int64_t max_steps = 100000) {
  int64_t step = 0;
  for (; step < max_steps; ++step) {
    if (before_step) before_step(step);
    if (!engine.has_unfinished_requests()) break;
    collector.absorb(engine.step());
    engine.check_invariants();
  }
  EXPECT_LT(step, max_steps) << "the engine did not finish";
  return step;
}

struct RequestSpec {
  std::vector<int32_t> prompt;
  SamplingParams params;
};

// Runs the requests (ids 0..n-1) together on a fresh engine over `model`.
inline std::map<int64_t, RequestRun> run_together(CausalLM& model, const EngineConfig& config,
                                                  const std::vector<RequestSpec>& requests,
                                                  EngineStats* stats = nullptr) {
  EngineCore engine(model, nullptr, config);
  for (size_t i = 0; i < requests.size(); ++i) {
    auto added = engine.add_request(static_cast<int64_t>(i), requests[i].prompt, requests[i].params);
    EXPECT_TRUE(added.ok()) << added.error().message;
  }
  OutputCollector collector;
  run_engine(engine, collector);
  if (stats != nullptr) *stats = engine.stats();
  return std::move(collector.runs());
}

// Each request on its own fresh engine (the engines run one after the other: each one
// reallocates the model's KV cache).
inline std::map<int64_t, RequestRun> run_each_alone(CausalLM& model, const EngineConfig& config,
                                                    const std::vector<RequestSpec>& requests) {
  std::map<int64_t, RequestRun> runs;
  for (size_t i = 0; i < requests.size(); ++i) {
    runs[static_cast<int64_t>(i)] = std::move(run_together(model, config, {requests[i]}).at(0));
  }
  return runs;
}

inline bool same_bits(const std::vector<double>& a, const std::vector<double>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::bit_cast<uint64_t>(a[i]) != std::bit_cast<uint64_t>(b[i])) return false;
  }
  return true;
}

inline bool same_top_bits(const std::vector<std::vector<std::pair<int32_t, double>>>& a,
                          const std::vector<std::vector<std::pair<int32_t, double>>>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (a[i].size() != b[i].size()) return false;
    for (size_t j = 0; j < a[i].size(); ++j) {
      if (a[i][j].first != b[i][j].first ||
          std::bit_cast<uint64_t>(a[i][j].second) != std::bit_cast<uint64_t>(b[i][j].second)) {
        return false;
      }
    }
  }
  return true;
}

// Token ids, logprobs and top logprobs of every sample equal, bit for bit.
inline void expect_identical(const std::map<int64_t, RequestRun>& got, const std::map<int64_t, RequestRun>& want,
                             const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (const auto& [id, run] : want) {
    const RequestRun& other = got.at(id);
    ASSERT_EQ(other.samples.size(), run.samples.size()) << what << ", request " << id;
    for (const auto& [index, sample] : run.samples) {
      const SampleRun& g = other.samples.at(index);
      EXPECT_EQ(g.token_ids, sample.token_ids) << what << ", request " << id << " sample " << index;
      EXPECT_TRUE(same_bits(g.logprobs, sample.logprobs)) << what << ", request " << id << " sample " << index;
      EXPECT_TRUE(same_top_bits(g.top, sample.top)) << what << ", request " << id << " sample " << index;
      EXPECT_EQ(g.finish_reason, sample.finish_reason) << what << ", request " << id << " sample " << index;
    }
  }
}

inline std::vector<int32_t> random_tokens(std::mt19937& rng, int32_t count, int32_t vocab) {
  std::uniform_int_distribution<int32_t> pick(0, vocab - 1);
  std::vector<int32_t> tokens(static_cast<size_t>(count));
  for (int32_t& t : tokens) t = pick(rng);
  return tokens;
}

// Runs `tokens` through `model` as one sequence in one forward pass on a KV cache of its own and
// returns the logits of rows [first_row, tokens.size()): [rows][vocab]. Reallocates the model's
// KV cache, so no engine may be using the model.
inline std::vector<std::vector<float>> forward_logits(CausalLM& model, const std::vector<int32_t>& tokens,
                                                      int32_t first_row) {
  constexpr int32_t kBlockSize = 16;
  const auto num_tokens = static_cast<int32_t>(tokens.size());
  const int32_t num_blocks = (num_tokens + kBlockSize - 1) / kBlockSize;
  model.allocate_kv_cache(KvCacheShape{num_blocks, kBlockSize});
  ForwardBatch batch;
  batch.token_ids = tokens;
  for (int32_t p = 0; p < num_tokens; ++p) {
    batch.positions.push_back(p);
    batch.slot_mapping.push_back(p);  // block b is block id b
  }
  batch.query_start = {0, num_tokens};
  batch.seq_len = {num_tokens};
  for (int32_t b = 0; b < num_blocks; ++b) batch.block_table.push_back(b);
  batch.max_blocks_per_seq = num_blocks;
  for (int32_t r = first_row; r < num_tokens; ++r) batch.logit_rows.push_back(r);
  const int64_t vocab = model.config().vocab_size;
  std::vector<float> flat(batch.logit_rows.size() * static_cast<size_t>(vocab));
  model.forward(batch, flat.data());
  std::vector<std::vector<float>> rows;
  for (size_t r = 0; r < batch.logit_rows.size(); ++r) {
    rows.emplace_back(flat.begin() + static_cast<ptrdiff_t>(r * static_cast<size_t>(vocab)),
                      flat.begin() + static_cast<ptrdiff_t>((r + 1) * static_cast<size_t>(vocab)));
  }
  return rows;
}

// The reference for one sample of one request run alone, with no scheduler, KV manager or
// engine: each token comes from a forward pass over the whole sequence so far on a fresh
// one-sequence cache, sampled by the documented rule (processors, then the (seed, position,
// sample index) draw). Stops at max_tokens only (the fixtures have no eos). In batch-invariant
// mode its logits are the engine's, bit for bit.
inline SampleRun reference_sample(CausalLM& model, const std::vector<int32_t>& prompt, const SamplingParams& params,
                                  int32_t sample_index) {
  SampleRun run;
  const int64_t vocab = model.config().vocab_size;
  std::vector<int32_t> tokens = prompt;
  for (int32_t i = 0; i < params.max_tokens; ++i) {
    std::vector<float> logits = forward_logits(model, tokens, static_cast<int32_t>(tokens.size()) - 1).back();
    std::vector<float> processed = logits;
    apply_logits_processors(processed.data(), vocab, params, prompt, run.token_ids, {});
    const int32_t token = sample_token(processed.data(), vocab, params, params.seed.value_or(0),
                                       static_cast<int64_t>(tokens.size()), sample_index);
    if (params.logprobs) {
      const TokenLogprob lp = token_logprob(logits.data(), vocab, token, *params.logprobs);
      run.logprobs.push_back(lp.logprob);
      run.top.push_back(lp.top);
    }
    run.token_ids.push_back(token);
    tokens.push_back(token);
  }
  return run;
}

}  // namespace deepinfer::testing
