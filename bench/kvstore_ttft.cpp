// deepinfer-bench-kvstore-ttft: time to first token of a long multi-turn prompt when 0 %, 50 %
// and 96 % of it is in the persistent KV store (local disk tier, page files dropped from the
// page cache first, so every hit is read from the device), against the same prompt with no
// store at all. Each case: a fresh store is filled by one engine running the prefix, then a
// second engine (empty device cache and host tier, as after a restart) runs the whole prompt.
// Each figure is the best of two runs (the machine may be shared). The prefix is a whole number
// of 128-token pages, so the fractions printed are the exact ones.
// Usage: deepinfer-bench-kvstore-ttft --model DIR [--prompt-tokens 3200] [--threads N] [--dir DIR]
// Prints a table, then one JSON line.
#include <fcntl.h>
#include <omp.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <vector>

#include "engine/engine_core.h"
#include "tool_flags.h"

namespace deepinfer::bench {
namespace {

constexpr const char* kUsage =
    "usage: deepinfer-bench-kvstore-ttft --model DIR [--prompt-tokens 3200] [--threads N] [--dir DIR]\n"
    "Time to first token of one long prompt with 0, 50 and 96 % of it in the KV store's disk tier,\n"
    "next to no store at all.\n";

constexpr int32_t kBlockSize = 128;

struct Loaded {
  std::unique_ptr<Backend> backend;
  std::unique_ptr<CausalLM> model;
};

EngineConfig engine_config(const std::string& store_dir, const std::string& model_dir) {
  EngineConfig config;
  config.block_size = kBlockSize;
  config.scheduler.max_num_seqs = 4;
  config.scheduler.max_num_batched_tokens = 2048;
  if (!store_dir.empty()) {
    config.kv_store.dir = store_dir;
    config.kv_store.host_bytes = int64_t{1} << 30;
    config.kv_store.model_identity = fingerprint_model_dir(model_dir).value();
  }
  return config;
}

struct Run {
  double ttft_s = 0.0;
  int32_t num_cached_tokens = 0;
};

// Runs the prompt to its first token on the engine; returns the time from add_request.
Run first_token(EngineCore& engine, const std::vector<int32_t>& prompt) {
  SamplingParams params;
  params.max_tokens = 1;
  params.ignore_eos = true;
  const auto start = std::chrono::steady_clock::now();
  if (!engine.add_request(0, prompt, params).ok()) return {};
  Run run;
  while (engine.has_unfinished_requests()) {
    for (const RequestOutput& out : engine.step()) {
      if (!out.samples.empty() && !out.samples[0].new_token_ids.empty() && run.ttft_s == 0.0) {
        run.ttft_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        run.num_cached_tokens = out.num_cached_tokens;
      }
    }
  }
  return run;
}

void drop_page_cache(const std::string& dir) {
  std::error_code ec;
  for (const auto& e : std::filesystem::recursive_directory_iterator(dir, ec)) {
    if (!e.is_regular_file()) continue;
    const int fd = ::open(e.path().c_str(), O_RDONLY);
    if (fd < 0) continue;
    ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    ::close(fd);
  }
}

Result<void> run(int argc, char** argv) {
  auto flags = parse_tool_flags(argc, argv, {"--model", "--prompt-tokens", "--threads", "--dir"});
  if (!flags.ok()) return flags.error();
  if (!flags->count("--model")) return Error{"--model DIR is required"};
  const std::string model_dir = flags->at("--model");
  const int64_t prompt_tokens = flags->count("--prompt-tokens") ? std::stoll(flags->at("--prompt-tokens")) : 3200;
  if (flags->count("--threads")) omp_set_num_threads(std::stoi(flags->at("--threads")));
  const std::string dir = flags->count("--dir") ? flags->at("--dir")
                                                : (std::filesystem::temp_directory_path() / "dikv-bench-ttft").string();
  auto backend = make_backend("cpu", BackendOptions{});
  if (!backend.ok()) return backend.error();
  auto model = load_model(model_dir, **backend, /*show_progress=*/false);
  if (!model.ok()) return model.error();
  const int64_t vocab = (*model)->config().vocab_size;
  std::vector<int32_t> prompt;
  for (int64_t i = 0; i < prompt_tokens; ++i) prompt.push_back(static_cast<int32_t>((i * 7919 + 13) % vocab));

  Run baseline;
  for (int repeat = 0; repeat < 2; ++repeat) {
    EngineCore plain(**model, nullptr, engine_config("", model_dir));
    const Run run = first_token(plain, prompt);
    if (repeat == 0 || run.ttft_s < baseline.ttft_s) baseline = run;
  }
  std::printf("%-26s %10s %14s %10s\n", "prompt in the store", "TTFT s", "cached tokens", "speed-up");
  std::printf("%-26s %10.3f %14d %10s\n", "no store", baseline.ttft_s, baseline.num_cached_tokens, "1.00");
  nlohmann::json out = {{"prompt_tokens", prompt_tokens}, {"no_store_ttft_s", baseline.ttft_s}};
  for (const double fraction : {0.0, 0.5, 0.96}) {
    std::filesystem::remove_all(dir);
    const auto prefix_pages = static_cast<int64_t>(fraction * static_cast<double>(prompt_tokens)) / kBlockSize;
    if (prefix_pages > 0) {
      // One more token so that every prefix page is full and computed, hence stored.
      const std::vector<int32_t> prefix(prompt.begin(), prompt.begin() + prefix_pages * kBlockSize + 1);
      EngineCore writer(**model, nullptr, engine_config(dir, model_dir));
      first_token(writer, prefix);
    }  // the writer's store drains its queue here
    // Each run stores the rest of the prompt, so every attempt starts from a copy of the store.
    const std::string pristine = dir + ".pristine";
    std::filesystem::remove_all(pristine);
    if (std::filesystem::exists(dir)) std::filesystem::copy(dir, pristine, std::filesystem::copy_options::recursive);
    Run run;
    for (int repeat = 0; repeat < 2; ++repeat) {
      std::filesystem::remove_all(dir);
      if (std::filesystem::exists(pristine)) std::filesystem::copy(pristine, dir, std::filesystem::copy_options::recursive);
      drop_page_cache(dir);
      EngineCore engine(**model, nullptr, engine_config(dir, model_dir));
      const Run attempt = first_token(engine, prompt);
      if (repeat == 0 || attempt.ttft_s < run.ttft_s) run = attempt;
    }
    std::filesystem::remove_all(pristine);
    char label[64];
    std::snprintf(label, sizeof(label), "%.0f %% (%lld pages)",
                  100.0 * static_cast<double>(prefix_pages * kBlockSize) / static_cast<double>(prompt_tokens),
                  static_cast<long long>(prefix_pages));
    std::printf("%-26s %10.3f %14d %10.2f\n", label, run.ttft_s, run.num_cached_tokens, baseline.ttft_s / run.ttft_s);
    out["hit_" + std::to_string(static_cast<int>(fraction * 100))] = {{"ttft_s", run.ttft_s},
                                                                       {"cached_tokens", run.num_cached_tokens}};
  }
  std::filesystem::remove_all(dir);
  std::printf("%s\n", out.dump().c_str());
  return {};
}

}  // namespace
}  // namespace deepinfer::bench

int main(int argc, char** argv) {
  return deepinfer::bench::tool_main(argc, argv, "deepinfer-bench-kvstore-ttft", deepinfer::bench::kUsage,
                                     deepinfer::bench::run);
}
