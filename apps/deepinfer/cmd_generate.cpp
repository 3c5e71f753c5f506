// `deepinfer generate`: continues a prompt given as text (needs tokenizer.json) or token ids.
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <optional>

#include "commands.h"
#include "core/thread_pool.h"
#include "engine/generator.h"
#include "recipe/chat_template.h"
#include "session.h"
#include "tokenizer/tokenizer.h"

namespace deepinfer::cli {
namespace {

constexpr const char* kUsage = R"(usage: deepinfer generate --model DIR (--prompt TEXT [--chat] | --tokens 1,2,3) [--max-tokens N]
                          [--temperature T] [--top-p P] [--top-k K] [--min-p P] [--seed S]
                          [--ignore-eos] [--device cpu|ref] [--threads N]
Prints the continuation as it is generated: text when the model directory has a tokenizer
(tokenizer.json), else token ids (comma-separated). --prompt needs the tokenizer; with --chat the
text is sent as one user message through the model's chat template (tokenizer_config.json).
Defaults: --max-tokens 64, --temperature 0 (greedy), --seed 0.
)";

// The prompt's ids: --tokens as given, --prompt encoded (the tokenizer's BOS rules applied), or
// --prompt --chat rendered by the model's chat template.
Result<std::vector<int32_t>> prompt_ids(const Args& args, const std::string& model_dir,
                                        const std::optional<Tokenizer>& tokenizer) {
  if (args.has("--tokens")) return args.get_int_list("--tokens");
  if (!tokenizer) return Error{"--prompt needs " + model_dir + "/tokenizer.json; give token ids with --tokens instead"};
  const std::string text = *args.find("--prompt");
  if (!args.has("--chat")) {
    auto ids = tokenizer->encode(text);
    if (!ids.ok()) return Error{"--prompt: " + ids.error().message};
    return tokenizer->add_special_tokens(*ids);
  }
  auto family = detect_chat_family(model_dir);
  if (!family.ok()) return family.error();
  const nlohmann::ordered_json request = {{"messages", {{{"role", "user"}, {"content", text}}}}};
  auto segments = render_chat_request(*family, request);
  if (!segments.ok()) return segments.error();
  ThreadPool pool;
  return encode_prompt(*tokenizer, *segments, &pool);
}

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
                          {"--ignore-eos", "--chat"});
  if (!args.ok()) return report_error("generate", args.error());
  if (args->has("--prompt") == args->has("--tokens")) {
    return report_error("generate", Error{"give exactly one of --prompt TEXT or --tokens 1,2,3"});
  }
  if (args->has("--chat") && !args->has("--prompt")) return report_error("generate", Error{"--chat needs --prompt"});
  auto options = options_from_args(*args);
  if (!options.ok()) return report_error("generate", options.error());
  const std::string model_dir = args->find("--model").value_or("");
  std::optional<Tokenizer> tokenizer;
  if (std::filesystem::exists(model_dir + "/tokenizer.json")) {
    auto loaded_tokenizer = Tokenizer::load(model_dir);
    if (!loaded_tokenizer.ok()) return report_error("generate", loaded_tokenizer.error());
    tokenizer = std::move(*loaded_tokenizer);
    if (auto eos = tokenizer->eos_id(); eos && !options->ignore_eos) options->stop_token_ids.push_back(*eos);
  }
  auto prompt = prompt_ids(*args, model_dir, tokenizer);
  if (!prompt.ok()) return report_error("generate", prompt.error());
  auto loaded = load_model_from_args(*args);
  if (!loaded.ok()) return report_error("generate", loaded.error());
  CausalLM& model = *loaded->model;

  const int64_t needed = static_cast<int64_t>(prompt->size()) + options->max_tokens;
  Generator generator(model, 128, std::min<int64_t>(needed, model.config().max_position_embeddings > 0
                                                               ? model.config().max_position_embeddings
                                                               : needed));
  const auto start = std::chrono::steady_clock::now();
  bool first = true;
  std::optional<StreamingDetokenizer> detokenizer;
  if (tokenizer) detokenizer.emplace(*tokenizer, true);
  auto generated = generator.generate(*prompt, *options, [&](int32_t token) {
    if (detokenizer) {
      const std::string text = detokenizer->push(token);
      std::fwrite(text.data(), 1, text.size(), stdout);
    } else {
      std::printf("%s%d", first ? "" : ",", token);
    }
    std::fflush(stdout);
    first = false;
  });
  if (detokenizer) {
    const std::string rest = detokenizer->flush();
    std::fwrite(rest.data(), 1, rest.size(), stdout);
  }
  std::printf("\n");
  if (!generated.ok()) return report_error("generate", generated.error());
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::fprintf(stderr, "[%zu prompt tokens, %zu generated in %.2fs]\n", prompt->size(), generated->size(), seconds);
  return 0;
}

}  // namespace deepinfer::cli
