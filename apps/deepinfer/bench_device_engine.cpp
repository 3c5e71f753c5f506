// The device benchmark's engine_loop lines: decode through EngineCore, the synchronous and the
// pipelined step loop side by side on the same requests (issue 21), so the host's share of a
// step shows as the ratio of the two; with a grammar-constrained request among them, what its
// host-side masks cost each loop.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <vector>

#include "bench_device.h"
#include "engine/engine_core.h"

namespace deepinfer::cli {
namespace {

struct LoopRun {
  double seconds = 0.0;
  int64_t tokens = 0;
  int64_t overlapped_steps = 0;
};

LoopRun run_loop(CausalLM& model, const Tokenizer* tokenizer, const std::vector<std::vector<int32_t>>& prompts,
                 int32_t max_tokens, bool pipelined, bool constrain_first) {
  constexpr int32_t kBlockSize = 16;
  const auto batch = static_cast<int32_t>(prompts.size());
  EngineConfig config;
  config.block_size = kBlockSize;
  const auto prompt_tokens = static_cast<int32_t>(prompts.front().size());
  config.num_kv_blocks = batch * ((prompt_tokens + max_tokens + kBlockSize - 1) / kBlockSize + 1);
  config.scheduler.max_num_seqs = batch;
  config.scheduler.max_num_batched_tokens = std::max(2048, batch * prompt_tokens);
  config.async_scheduling = pipelined;
  EngineCore engine(model, tokenizer, config);
  SamplingParams params;
  params.max_tokens = max_tokens;
  params.ignore_eos = true;
  params.temperature = 0.8;
  params.top_k = 50;
  params.top_p = 0.95;
  for (int32_t i = 0; i < batch; ++i) {
    params.seed = static_cast<uint64_t>(i);
    params.structured_output.reset();
    if (i == 0 && constrain_first) {
      // Quick to compile, and never forced to end: the request runs to max_tokens.
      StructuredOutputParams regex;
      regex.kind = StructuredOutputParams::Kind::kRegex;
      regex.spec = "[a-z ]*";
      params.structured_output = regex;
    }
    if (auto added = engine.add_request(i, prompts[static_cast<size_t>(i)], params); !added.ok()) {
      throw std::runtime_error(added.error().message);
    }
  }
  LoopRun run;
  const auto start = std::chrono::steady_clock::now();
  while (engine.has_unfinished_requests()) {
    for (const RequestOutput& out : engine.step()) {
      if (out.failure) throw std::runtime_error(out.failure->message);
      for (const SampleOutput& sample : out.samples) run.tokens += static_cast<int64_t>(sample.new_token_ids.size());
    }
  }
  run.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  run.overlapped_steps = engine.stats().num_overlapped_steps;
  return run;
}

}  // namespace

void bench_engine_loops(CausalLM& model, const Tokenizer* tokenizer, int32_t batch, int32_t max_tokens,
                        const std::vector<bool>& loops) {
  const bool constrained = tokenizer != nullptr;
  constexpr int32_t kPromptTokens = 32;
  constexpr int kRuns = 3;
  std::mt19937 rng(17);
  std::uniform_int_distribution<int32_t> pick(0, static_cast<int32_t>(model.config().vocab_size) - 1);
  std::vector<std::vector<int32_t>> prompts(static_cast<size_t>(batch), std::vector<int32_t>(kPromptTokens));
  for (auto& prompt : prompts) {
    for (int32_t& token : prompt) token = pick(rng);
  }
  // A warm-up of each loop (graph captures, workspaces), then the runs alternating between them.
  std::vector<std::vector<double>> rates(loops.size());
  std::vector<LoopRun> last(loops.size());
  for (int r = 0; r <= kRuns; ++r) {
    for (size_t l = 0; l < loops.size(); ++l) {
      last[l] = run_loop(model, tokenizer, prompts, max_tokens, loops[l], constrained);
      if (r > 0) rates[l].push_back(static_cast<double>(last[l].tokens) / last[l].seconds);
    }
  }
  std::printf("{\"kind\":\"engine_loop\",\"batch\":%d,\"grammar_requests\":%d,\"prompt_tokens\":%d,"
              "\"max_tokens\":%d,\"runs\":%d",
              batch, constrained ? 1 : 0, kPromptTokens, max_tokens, kRuns);
  std::vector<double> medians;
  for (size_t l = 0; l < loops.size(); ++l) {
    std::sort(rates[l].begin(), rates[l].end());
    medians.push_back(rates[l][rates[l].size() / 2]);
    std::printf(",\"%s_tok_s\":%.1f", loops[l] ? "async" : "sync", medians.back());
    if (loops[l]) std::printf(",\"overlapped_steps\":%lld", static_cast<long long>(last[l].overlapped_steps));
  }
  if (loops.size() == 2) std::printf(",\"async_over_sync\":%.3f", medians[1] / medians[0]);
  std::printf("}\n");
  std::fflush(stdout);
}

}  // namespace deepinfer::cli
