// `deepinfer generate`: continues a prompt given as text (needs tokenizer.json) or token ids.
#include <chrono>
#include <cstdio>

#include "commands.h"
#include "engine/generator.h"
#include "session.h"

namespace deepinfer::cli {
namespace {

constexpr const char* kUsage = R"(usage: deepinfer generate --model DIR (--prompt TEXT | --tokens 1,2,3) [--max-tokens N]
                          [--temperature T] [--top-p P] [--top-k K] [--min-p P] [--seed S]
                          [--ignore-eos] [--device cpu|ref] [--threads N]
Prints the continuation: text when the model directory has a tokenizer, else token ids
(comma-separated). Defaults: --max-tokens 64, --temperature 0 (greedy), --seed 0.
)";

Result<GenerateOptions> options_from_args(const Args& args) {
  GenerateOptions options;
  auto max_tokens = args.get_int("--max-tokens", 64);
  if (!max_tokens.ok()) return max_tokens.error();
  if (*max_tokens < 0 || *max_tokens > 1'000'000) return Error{"--max-tokens must be in [0, 1000000]"};
  options.max_tokens = static_cast<int32_t>(*max_tokens);
  auto temperature = args.get_double("--temperature", 0.0);
  if (!temperature.ok()) return temperature.error();
  auto top_p = args.get_double("--top-p", 1.0);
  if (!top_p.ok()) return top_p.error();
  auto top_k = args.get_int("--top-k", 0);
  if (!top_k.ok()) return top_k.error();
  auto min_p = args.get_double("--min-p", 0.0);
  if (!min_p.ok()) return min_p.error();
  auto seed = args.get_int("--seed", 0);
  if (!seed.ok()) return seed.error();
  options.sampling.temperature = *temperature;
  options.sampling.top_p = *top_p;
  options.sampling.top_k = static_cast<int32_t>(std::clamp<int64_t>(*top_k, -1, INT32_MAX));
  options.sampling.min_p = *min_p;
  options.sampling.seed = static_cast<uint64_t>(*seed);
  options.ignore_eos = args.has("--ignore-eos");
  auto valid = options.sampling.validate();
  if (!valid.ok()) return Error{"--" + valid.error().message};
  return options;
}

}  // namespace

int run_generate(int argc, char** argv) {
  if (wants_help(argc, argv, kUsage)) return 0;
  auto args = Args::parse(argc, argv,
                          model_value_flags({"--prompt", "--tokens", "--max-tokens", "--temperature", "--top-p",
                                             "--top-k", "--min-p", "--seed"}),
                          {"--ignore-eos"});
  if (!args.ok()) return report_error("generate", args.error());
  if (args->has("--prompt") == args->has("--tokens")) {
    return report_error("generate", Error{"give exactly one of --prompt TEXT or --tokens 1,2,3"});
  }
  auto options = options_from_args(*args);
  if (!options.ok()) return report_error("generate", options.error());
  auto loaded = load_model_from_args(*args);
  if (!loaded.ok()) return report_error("generate", loaded.error());
  CausalLM& model = *loaded->model;

  auto prompt = args->get_int_list("--tokens");
  if (!prompt.ok()) return report_error("generate", prompt.error());
  const int64_t needed = static_cast<int64_t>(prompt->size()) + options->max_tokens;
  Generator generator(model, 128, std::min<int64_t>(needed, model.config().max_position_embeddings > 0
                                                               ? model.config().max_position_embeddings
                                                               : needed));
  const auto start = std::chrono::steady_clock::now();
  bool first = true;
  auto generated = generator.generate(*prompt, *options, [&](int32_t token) {
    std::printf("%s%d", first ? "" : ",", token);
    std::fflush(stdout);
    first = false;
  });
  std::printf("\n");
  if (!generated.ok()) return report_error("generate", generated.error());
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::fprintf(stderr, "[%zu prompt tokens, %zu generated in %.2fs]\n", prompt->size(), generated->size(), seconds);
  return 0;
}

}  // namespace deepinfer::cli
