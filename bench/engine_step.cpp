// deepinfer-bench-engine-step: the engine's own host time per decode step (schedule, build the
// batch, commit KV, sampling bookkeeping, detokenize, stop strings) with --seqs sequences of
// --context tokens running, the model replaced by a stub whose forward pass does nothing and
// whose "device" draws a fixed token per position. Only EngineCore's work is left to time.
// Usage: deepinfer-bench-engine-step [--seqs 256] [--context 32768] [--steps 64] [--warmup 8]
//          [--tokenizer DIR]
// Prints per-step wall time (minimum, median, mean: the minimum and median resist a loaded
// machine) and one JSON line. Under callgrind, count only the timed steps' instructions:
//   valgrind --tool=callgrind --toggle-collect='*timed_decode_steps*' deepinfer-bench-engine-step ...
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "engine/engine_core.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"
#include "tool_flags.h"

namespace deepinfer::bench {

// Runs num_steps engine steps; each must give every running sequence one token. Returns the
// wall time of each step. Out of line so that callgrind can collect this function alone.
[[gnu::noinline]] Result<std::vector<double>> timed_decode_steps(EngineCore& engine, int64_t num_steps,
                                                                 size_t num_seqs) {
  std::vector<double> seconds;
  seconds.reserve(static_cast<size_t>(num_steps));
  for (int64_t i = 0; i < num_steps; ++i) {
    const auto start = std::chrono::steady_clock::now();
    const std::vector<RequestOutput> outputs = engine.step();
    seconds.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    size_t num_tokens = 0;
    for (const RequestOutput& out : outputs) {
      if (out.finished) return Error{"a request finished during the timed steps"};
      for (const SampleOutput& sample : out.samples) num_tokens += sample.new_token_ids.size();
    }
    if (num_tokens != num_seqs) {
      return Error{"a decode step gave " + std::to_string(num_tokens) + " tokens for " + std::to_string(num_seqs) +
                   " sequences"};
    }
  }
  return seconds;
}

namespace {

constexpr const char* kUsage =
    "usage: deepinfer-bench-engine-step [--seqs 256] [--context 32768] [--steps 64] [--warmup 8]\n"
    "         [--tokenizer DIR]\n"
    "The engine's host time per decode step with --seqs sequences of --context tokens, the model's\n"
    "forward pass replaced by a stub that costs nothing. --tokenizer: a model directory with\n"
    "tokenizer.json (default: the embedded models/deepinfer-tiny-v3).\n";

struct Options {
  int64_t seqs = 256;
  int64_t context = 32768;
  int64_t steps = 64;
  int64_t warmup = 8;
  std::string tokenizer_dir = DEEPINFER_SOURCE_DIR "/models/deepinfer-tiny-v3";
};

Result<Options> parse_options(int argc, char** argv) {
  auto flags = parse_tool_flags(argc, argv, {"--seqs", "--context", "--steps", "--warmup", "--tokenizer"});
  if (!flags.ok()) return flags.error();
  Options options;
  if (flags->count("--tokenizer")) options.tokenizer_dir = flags->at("--tokenizer");
  for (auto [flag, value] : {std::pair{"--seqs", &options.seqs}, std::pair{"--context", &options.context},
                             std::pair{"--steps", &options.steps}, std::pair{"--warmup", &options.warmup}}) {
    if (!flags->count(flag)) continue;
    try {
      *value = std::stoll(flags->at(flag));
    } catch (const std::exception&) {
      return Error{std::string(flag) + " must be an integer, got '" + flags->at(flag) + "'"};
    }
    if (*value < (std::string(flag) == "--warmup" ? 0 : 1) || *value > (int64_t{1} << 24)) {
      return Error{std::string(flag) + " is out of range"};
    }
  }
  return options;
}

// A model without weights or KV memory: forward() leaves the logits at zero and the backend
// "draws" the token that text_tokens assigns to the row's position, so every step costs the
// model nothing and the detokenizer sees ordinary text.
class StubModel final : public CausalLM {
 public:
  StubModel(ModelConfig config, Backend& backend, std::vector<int32_t> text_tokens)
      : CausalLM(std::move(config), backend), text_tokens_(std::move(text_tokens)) {}

  int64_t kv_bytes_per_token() const override { return 1; }
  void allocate_kv_cache(const KvCacheShape& shape) override { shape_ = shape; }
  KvCacheShape kv_cache_shape() const override { return shape_; }
  void copy_kv_blocks(const std::vector<std::pair<int32_t, int32_t>>& /*src_dst*/) override {}
  int64_t kv_floats_per_block() const override { return 0; }
  void read_kv_blocks(const std::vector<int32_t>& /*block_ids*/, float* /*host*/) const override {}
  void write_kv_blocks(const std::vector<int32_t>& /*block_ids*/, const float* /*host*/) override {}
  int64_t full_kv_bytes_per_block() const override { return 0; }
  void read_full_kv_blocks(const std::vector<int32_t>& /*block_ids*/, uint8_t* /*host*/) const override {}
  void write_full_kv_blocks(const std::vector<int32_t>& /*block_ids*/, const uint8_t* /*host*/) override {}
  void forward(const ForwardBatch& batch, float* logits) override {
    std::fill_n(logits, batch.logit_rows.size() * static_cast<size_t>(config().vocab_size), 0.0f);
  }
  std::unique_ptr<PendingCopies> launch_sampled(const ForwardBatch& batch, const std::vector<kernels::SampleParams>& draws,
                                                int32_t* token_ids, const std::vector<int32_t>& /*host_rows*/,
                                                float* /*host_logits*/) override {
    for (size_t i = 0; i < draws.size(); ++i) {
      const int32_t position = batch.positions[static_cast<size_t>(batch.logit_rows[static_cast<size_t>(draws[i].row)])];
      token_ids[i] = text_tokens_[static_cast<size_t>(position) % text_tokens_.size()];
    }
    return backend_.copy_to_host_later({});
  }
  int64_t weight_bytes_per_token() const override { return 0; }

 private:
  std::vector<int32_t> text_tokens_;
  KvCacheShape shape_;
};

// Ordinary (not special, not eos) tokens of the vocabulary, a few thousand at most.
std::vector<int32_t> text_tokens(const Tokenizer& tokenizer) {
  std::vector<int32_t> tokens;
  const int32_t vocab = tokenizer.vocab_size();
  const int32_t stride = std::max(1, vocab / 4096);
  for (int32_t id = 0; id < vocab; id += stride) {
    if (!tokenizer.is_special(id) && tokenizer.eos_id() != id && tokenizer.id_to_token(id)) tokens.push_back(id);
  }
  return tokens;
}

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const size_t mid = values.size() / 2;
  return values.size() % 2 == 1 ? values[mid] : 0.5 * (values[mid - 1] + values[mid]);
}

Result<void> run(int argc, char** argv) {
  auto parsed = parse_options(argc, argv);
  if (!parsed.ok()) return parsed.error();
  const Options& options = *parsed;
  auto loaded = Tokenizer::load(options.tokenizer_dir);
  if (!loaded.ok()) return loaded.error();
  const Tokenizer& tokenizer = *loaded;
  const std::vector<int32_t> tokens = text_tokens(tokenizer);
  if (tokens.empty()) return Error{"the tokenizer in " + options.tokenizer_dir + " has no ordinary tokens"};
  auto backend = make_backend("cpu");
  if (!backend.ok()) return backend.error();
  // The prefill's token, the warm-up and timed steps' tokens, and one more so none finishes.
  const int64_t max_tokens = options.warmup + options.steps + 2;
  ModelConfig model_config;
  model_config.architecture = "StubForCausalLM";
  model_config.vocab_size = tokenizer.vocab_size();
  model_config.max_position_embeddings = options.context + max_tokens + 1;
  StubModel model(model_config, **backend, tokens);

  EngineConfig config;
  config.num_kv_blocks =
      static_cast<int32_t>(options.seqs * blocks_for_tokens(options.context + max_tokens, config.block_size));
  config.scheduler.max_num_seqs = static_cast<int32_t>(options.seqs);
  // Every prompt in one step: the prefill is set-up here, not what is measured.
  config.scheduler.max_num_batched_tokens = static_cast<int32_t>(options.seqs * options.context);
  EngineCore engine(model, &tokenizer, config);

  SamplingParams params;
  params.temperature = 0.0;
  params.max_tokens = static_cast<int32_t>(max_tokens);
  params.ignore_eos = true;
  params.stop = {"\u2603 never \u2603"};  // checked every step, never found
  for (int64_t s = 0; s < options.seqs; ++s) {
    // Distinct from the first block on, so no two sequences share a cached prefix.
    std::vector<int32_t> prompt(static_cast<size_t>(options.context));
    for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = tokens[(i * 7 + static_cast<size_t>(s) * 13) % tokens.size()];
    prompt[0] = tokens[static_cast<size_t>(s) % tokens.size()];
    prompt[1] = tokens[static_cast<size_t>(s) / tokens.size() % tokens.size()];
    DI_TRY(engine.add_request(s, std::move(prompt), params));
  }
  std::fprintf(stderr, "bench-engine-step: prefilling %lld x %lld tokens\n", static_cast<long long>(options.seqs),
               static_cast<long long>(options.context));
  const auto num_seqs = static_cast<size_t>(options.seqs);
  while (engine.stats().num_waiting > 0) engine.step();
  if (engine.stats().num_running != num_seqs) return Error{"not every sequence is running after the prefill"};
  DI_TRY(timed_decode_steps(engine, options.warmup, num_seqs));
  auto timed = timed_decode_steps(engine, options.steps, num_seqs);
  if (!timed.ok()) return timed.error();
  const std::vector<double>& seconds = *timed;

  const double min_us = *std::min_element(seconds.begin(), seconds.end()) * 1e6;
  const double median_us = median(seconds) * 1e6;
  double mean_us = 0.0;
  for (double s : seconds) mean_us += s * 1e6 / static_cast<double>(seconds.size());
  std::printf("| sequences | context | steps | min us/step | median us/step | mean us/step | median ns/seq |\n");
  std::printf("|---|---|---|---|---|---|---|\n");
  std::printf("| %lld | %lld | %lld | %.1f | %.1f | %.1f | %.0f |\n", static_cast<long long>(options.seqs),
              static_cast<long long>(options.context), static_cast<long long>(options.steps), min_us, median_us,
              mean_us, median_us * 1e3 / static_cast<double>(options.seqs));
  std::printf(
      "{\"seqs\":%lld,\"context\":%lld,\"steps\":%lld,\"min_us_per_step\":%.1f,\"median_us_per_step\":%.1f,"
      "\"mean_us_per_step\":%.1f}\n",
      static_cast<long long>(options.seqs), static_cast<long long>(options.context),
      static_cast<long long>(options.steps), min_us, median_us, mean_us);
  return {};
}

}  // namespace
}  // namespace deepinfer::bench

int main(int argc, char** argv) {
  return deepinfer::bench::tool_main(argc, argv, "deepinfer-bench-engine-step", deepinfer::bench::kUsage,
                                     deepinfer::bench::run);
}
