// deepinfer: the command-line entry point; dispatches to the subcommands in commands.h.
#include <cstdio>
#include <cstring>
#include <exception>
#include <string>

#include "commands.h"

namespace {

constexpr const char* kUsage = R"(deepinfer — an LLM inference engine

usage: deepinfer <command> [flags]

commands:
  generate   continue a prompt:  --model DIR (--prompt TEXT | --tokens 1,2,3) [--max-tokens N]
             [--temperature T] [--top-p P] [--top-k K] [--min-p P] [--seed S] [--ignore-eos]
             [--device cpu|ref|cuda] [--threads N]
  score      per-position top-k logprobs of a token sequence as JSON lines:
             --model DIR --tokens 1,2,3 [--top-logprobs K] [--dump-logits FILE]
  bench      prefill and decode speed at batch 1, against memory bandwidth:
             --model DIR [--prompt-tokens N] [--decode-tokens N] [--threads N]
  tokenize   UTF-8 text on stdin -> JSON array of token ids: --model DIR [--special]
  detokenize JSON array of token ids on stdin -> text: --model DIR
  prompt     {"messages":[...],"tools":[...]} on stdin -> the model's rendered chat prompt:
             --model DIR [--tokens]
  serve      OpenAI- and Anthropic-compatible HTTP server: [--model DIR] [--host H] [--port P]
             [--served-model-name NAME] [--api-key KEY] ...
  router     the cluster's entry point: the same APIs, each request run on a worker registered in
             Redis (deepinfer serve --register URL): --redis redis://HOST:PORT [--policy NAME]
  bench serve  load a running server, vLLM benchmark_serving style: --url http://127.0.0.1:8000
  bench images the image encoder's speed on one image: --model DIR [--device cuda] [--width W] [--height H]
  lb-sim     replay a request trace through simulated prefill/decode instances under each
             load-balancing policy: --trace FILE.jsonl [--prefill-instances N] [--rate-scale X]

  deepinfer <command> --help   shows a command's flags
  deepinfer --version          prints the version
)";

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || std::strcmp(argv[1], "--help") == 0 || std::strcmp(argv[1], "-h") == 0) {
    std::fputs(kUsage, argc < 2 ? stderr : stdout);
    return argc < 2 ? 2 : 0;
  }
  if (std::strcmp(argv[1], "--version") == 0) {
    std::printf("deepinfer %s\n", DEEPINFER_VERSION);
    return 0;
  }
  const std::string command = argv[1];
  try {
    using namespace deepinfer::cli;
    if (command == "generate") return run_generate(argc - 1, argv + 1);
    if (command == "score") return run_score(argc - 1, argv + 1);
    if (command == "bench" && argc > 2 && std::strcmp(argv[2], "serve") == 0) return run_bench_serve(argc - 2, argv + 2);
    if (command == "bench" && argc > 2 && std::strcmp(argv[2], "images") == 0) {
      return run_bench_images(argc - 2, argv + 2);
    }
    if (command == "bench") return run_bench(argc - 1, argv + 1);
    if (command == "serve") return run_serve(argc - 1, argv + 1);
    if (command == "tokenize") return run_tokenize(argc - 1, argv + 1);
    if (command == "detokenize") return run_detokenize(argc - 1, argv + 1);
    if (command == "prompt") return run_prompt(argc - 1, argv + 1);
    if (command == "lb-sim") return run_lb_sim(argc - 1, argv + 1);
    if (command == "router") return run_router(argc - 1, argv + 1);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "deepinfer %s: error: %s\n", command.c_str(), e.what());
    return 1;
  }
  std::fprintf(stderr, "deepinfer: unknown command '%s'\n\n%s", command.c_str(), kUsage);
  return 2;
}
