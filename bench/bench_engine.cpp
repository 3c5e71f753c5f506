// deepinfer-bench-engine: the engine end to end through deepinfer::LLM on one model.
//  1. Offline throughput: the same N requests (random prompts, greedy, fixed output length) with
//     N sequences running at once vs one at a time; generated tokens/s and their ratio.
//  2. Time to first token of a long prompt on a prefix-cache miss vs a full hit (the same
//     prompt again: every block but the last is cached); best of two prompts each.
// Usage: deepinfer-bench-engine --model DIR [--threads N] [--requests 64] [--prompt-tokens 128]
//          [--output-tokens 64] [--long-prompt-tokens 4096] [--batch-invariant 0|1]
// Prints a table, then one JSON line with every figure. bench/run_bench.sh runs it.
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "deepinfer/llm.h"
#include "tool_flags.h"

namespace deepinfer::bench {
namespace {

constexpr const char* kUsage =
    "usage: deepinfer-bench-engine --model DIR [--threads N] [--requests 64] [--prompt-tokens 128]\n"
    "         [--output-tokens 64] [--long-prompt-tokens 4096] [--batch-invariant 0|1]\n"
    "Offline throughput with --requests sequences at once vs one at a time, and time to first token\n"
    "of a --long-prompt-tokens prompt on a prefix-cache miss vs a full hit.\n";

struct Options {
  std::string model_dir;
  int64_t threads = 0;
  int64_t requests = 64;
  int64_t prompt_tokens = 128;
  int64_t output_tokens = 64;
  int64_t long_prompt_tokens = 4096;
  bool batch_invariant = false;
};

Result<Options> parse_options(int argc, char** argv) {
  auto flags = parse_tool_flags(argc, argv,
                                {"--model", "--threads", "--requests", "--prompt-tokens", "--output-tokens",
                                 "--long-prompt-tokens", "--batch-invariant"});
  if (!flags.ok()) return flags.error();
  if (!flags->count("--model")) return Error{"--model is required"};
  Options options;
  options.model_dir = flags->at("--model");
  for (auto [flag, value] :
       {std::pair{"--threads", &options.threads}, std::pair{"--requests", &options.requests},
        std::pair{"--prompt-tokens", &options.prompt_tokens}, std::pair{"--output-tokens", &options.output_tokens},
        std::pair{"--long-prompt-tokens", &options.long_prompt_tokens}}) {
    if (!flags->count(flag)) continue;
    try {
      *value = std::stoll(flags->at(flag));
    } catch (const std::exception&) {
      return Error{std::string(flag) + " must be an integer, got '" + flags->at(flag) + "'"};
    }
    if (*value < (std::string(flag) == "--threads" ? 0 : 1)) return Error{std::string(flag) + " is out of range"};
  }
  if (flags->count("--batch-invariant")) {
    const std::string& value = flags->at("--batch-invariant");
    if (value != "0" && value != "1") return Error{"--batch-invariant takes 0 or 1, got '" + value + "'"};
    options.batch_invariant = value == "1";
  }
  return options;
}

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

Result<std::unique_ptr<LLM>> open_llm(const Options& options, int32_t max_num_seqs) {
  LLMConfig config;
  config.model_dir = options.model_dir;
  config.max_num_seqs = max_num_seqs;
  config.batch_invariant = options.batch_invariant;
  config.show_progress = false;
  config.kv_cache_bytes = int64_t{1} << 30;  // mmap'd: only the pages the runs touch are used
  return LLM::open(config);
}

std::vector<Prompt> random_prompts(int64_t count, int64_t length, int64_t vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> pick(0, static_cast<int32_t>(vocab - 1));
  std::vector<Prompt> prompts(static_cast<size_t>(count));
  for (Prompt& p : prompts) {
    p.token_ids.resize(static_cast<size_t>(length));
    for (int32_t& t : p.token_ids) t = pick(rng);
  }
  return prompts;
}

struct ThroughputRun {
  double seconds = 0.0;
  int64_t generated_tokens = 0;
  std::vector<std::vector<int32_t>> outputs;
};

// All requests through one LLM that runs at most max_num_seqs at once; a short warm-up first
// pages the weights in.
Result<ThroughputRun> run_offline(const Options& options, int32_t max_num_seqs) {
  auto llm = open_llm(options, max_num_seqs);
  if (!llm.ok()) return llm.error();
  SamplingParams params;
  params.temperature = 0.0;
  params.max_tokens = static_cast<int32_t>(options.output_tokens);
  params.ignore_eos = true;
  const int64_t vocab = (*llm)->vocab_size();
  SamplingParams warm_params = params;
  warm_params.max_tokens = 2;
  DI_TRY((*llm)->generate(random_prompts(1, 16, vocab, 99), {warm_params}));
  const std::vector<Prompt> prompts = random_prompts(options.requests, options.prompt_tokens, vocab, 1);
  const auto start = std::chrono::steady_clock::now();
  auto results = (*llm)->generate(prompts, {params});
  if (!results.ok()) return results.error();
  ThroughputRun run;
  run.seconds = seconds_since(start);
  for (const GenerationResult& r : *results) {
    run.generated_tokens += static_cast<int64_t>(r.outputs.at(0).token_ids.size());
    run.outputs.push_back(r.outputs.at(0).token_ids);
  }
  return run;
}

struct TtftRun {
  double miss_s = 1e30;
  double hit_s = 1e30;
  int32_t hit_cached_tokens = 0;
};

// A one-token generation: its time is the prompt's time to first token.
Result<std::pair<double, int32_t>> time_to_first_token(LLM& llm, const Prompt& prompt) {
  SamplingParams params;
  params.temperature = 0.0;
  params.max_tokens = 1;
  params.ignore_eos = true;
  const auto start = std::chrono::steady_clock::now();
  auto results = llm.generate({prompt}, {params});
  if (!results.ok()) return results.error();
  return std::pair{seconds_since(start), results->at(0).num_cached_tokens};
}

Result<TtftRun> run_ttft(const Options& options) {
  auto llm = open_llm(options, 1);
  if (!llm.ok()) return llm.error();
  TtftRun run;
  for (uint32_t seed : {11u, 12u}) {
    const Prompt prompt = random_prompts(1, options.long_prompt_tokens, (*llm)->vocab_size(), seed).front();
    auto miss = time_to_first_token(**llm, prompt);
    if (!miss.ok()) return miss.error();
    if (miss->second != 0) return Error{"the first run of a fresh prompt hit the prefix cache"};
    auto hit = time_to_first_token(**llm, prompt);
    if (!hit.ok()) return hit.error();
    run.miss_s = std::min(run.miss_s, miss->first);
    run.hit_s = std::min(run.hit_s, hit->first);
    run.hit_cached_tokens = hit->second;
  }
  return run;
}

int run(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    if (std::string(argv[i]) == "--help") {
      std::fputs(kUsage, stdout);
      return 0;
    }
  }
  auto options = parse_options(argc, argv);
  if (!options.ok()) {
    std::fprintf(stderr, "deepinfer-bench-engine: %s\n%s", options.error().message.c_str(), kUsage);
    return 1;
  }
  if (options->threads > 0) omp_set_num_threads(static_cast<int>(options->threads));
  const auto fail = [](const Error& error) {
    std::fprintf(stderr, "deepinfer-bench-engine: %s\n", error.message.c_str());
    return 1;
  };
  std::fprintf(stderr, "bench-engine: %lld requests at once\n", static_cast<long long>(options->requests));
  auto batched = run_offline(*options, static_cast<int32_t>(options->requests));
  if (!batched.ok()) return fail(batched.error());
  std::fprintf(stderr, "bench-engine: the same requests one at a time\n");
  auto sequential = run_offline(*options, 1);
  if (!sequential.ok()) return fail(sequential.error());
  std::fprintf(stderr, "bench-engine: time to first token, %lld-token prompt\n",
               static_cast<long long>(options->long_prompt_tokens));
  auto ttft = run_ttft(*options);
  if (!ttft.ok()) return fail(ttft.error());

  const double batched_tok_s = static_cast<double>(batched->generated_tokens) / batched->seconds;
  const double sequential_tok_s = static_cast<double>(sequential->generated_tokens) / sequential->seconds;
  const bool same_outputs = batched->outputs == sequential->outputs;
  std::printf("model %s, %d threads, batch-invariant %s\n", options->model_dir.c_str(), omp_get_max_threads(),
              options->batch_invariant ? "on" : "off");
  std::printf("| run | requests | prompt | output | seconds | generated tok/s |\n|---|---|---|---|---|---|\n");
  std::printf("| %lld at once | %lld | %lld | %lld | %.2f | %.1f |\n", static_cast<long long>(options->requests),
              static_cast<long long>(options->requests), static_cast<long long>(options->prompt_tokens),
              static_cast<long long>(options->output_tokens), batched->seconds, batched_tok_s);
  std::printf("| one at a time | %lld | %lld | %lld | %.2f | %.1f |\n", static_cast<long long>(options->requests),
              static_cast<long long>(options->prompt_tokens), static_cast<long long>(options->output_tokens),
              sequential->seconds, sequential_tok_s);
  std::printf("throughput ratio %.2fx; identical outputs: %s\n", batched_tok_s / sequential_tok_s,
              same_outputs ? "yes" : "no");
  std::printf("TTFT %lld-token prompt: miss %.3f s, full hit %.3f s (%d tokens cached), ratio %.1fx\n",
              static_cast<long long>(options->long_prompt_tokens), ttft->miss_s, ttft->hit_s, ttft->hit_cached_tokens,
              ttft->miss_s / ttft->hit_s);
  std::printf(
      "{\"threads\":%d,\"batch_invariant\":%s,\"requests\":%lld,\"prompt_tokens\":%lld,\"output_tokens\":%lld,"
      "\"batched_s\":%.3f,\"batched_tok_s\":%.2f,\"sequential_s\":%.3f,\"sequential_tok_s\":%.2f,"
      "\"throughput_ratio\":%.3f,\"identical_outputs\":%s,\"long_prompt_tokens\":%lld,\"ttft_miss_s\":%.4f,"
      "\"ttft_hit_s\":%.4f,\"hit_cached_tokens\":%d,\"ttft_ratio\":%.2f}\n",
      omp_get_max_threads(), options->batch_invariant ? "true" : "false", static_cast<long long>(options->requests),
      static_cast<long long>(options->prompt_tokens), static_cast<long long>(options->output_tokens), batched->seconds,
      batched_tok_s, sequential->seconds, sequential_tok_s, batched_tok_s / sequential_tok_s,
      same_outputs ? "true" : "false", static_cast<long long>(options->long_prompt_tokens), ttft->miss_s, ttft->hit_s,
      ttft->hit_cached_tokens, ttft->miss_s / ttft->hit_s);
  return 0;
}

}  // namespace
}  // namespace deepinfer::bench

int main(int argc, char** argv) { return deepinfer::bench::run(argc, argv); }
