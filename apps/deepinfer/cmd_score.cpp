// `deepinfer score`: top-k logprobs at every position of a token sequence, as JSON lines.
#include <cstdio>

#include "commands.h"
#include "data_parallel_flags.h"
#include "engine/generator.h"
#include "session.h"

namespace deepinfer::cli {
namespace {

constexpr const char* kUsage = R"(usage: deepinfer score --model DIR --tokens 1,2,3 [--top-logprobs K] [--dump-logits FILE]
                       [--device cpu|ref|cuda] [--threads N] [--batch-invariant]
                       [--kv-cache-dtype auto|float32|bfloat16|fp8]
                       [--data-parallel-size N --expert-parallel [--num-redundant-experts R]
                        [--expert-placement FILE] [--eplb-interval N] [--eplb-window N]
                        [--eplb-policy peak-aware|deepseek] [--expert-placement-out FILE]]
Prints one JSON object per input position i: {"pos":i,"token":id,"top":[[id,logprob],...]} where
logprobs are the log-softmax over the full vocabulary of the logits at position i (predicting
token i+1), top K (default 8) by logprob descending. --dump-logits writes the last position's raw
logits as little-endian float32. --kv-cache-dtype: as deepinfer serve --help says.
With --data-parallel-size N --expert-parallel the MoE layers' experts are spread over N ranks
(processes; rank 0 scores, the others serve its tokens' experts), to check a model under expert
parallelism: in --batch-invariant mode the output is that of one rank bit for bit. The EPLB flags
are those of deepinfer generate --help (a score runs one forward round per prompt chunk); the
other data-parallel flags are those of deepinfer serve --help.
)";

Result<void> write_logits(const std::string& path, const float* logits, int64_t count) {
  std::FILE* file = std::fopen(path.c_str(), "wb");
  if (file == nullptr) return Error{"cannot open " + path + " for writing"};
  const size_t written = std::fwrite(logits, sizeof(float), static_cast<size_t>(count), file);
  const bool closed = std::fclose(file) == 0;
  if (written != static_cast<size_t>(count) || !closed) return Error{"cannot write logits to " + path};
  return {};
}

}  // namespace

int run_score(int argc, char** argv) {
  if (wants_help(argc, argv, kUsage)) return 0;
  auto args = Args::parse(argc, argv, data_parallel_value_flags(model_value_flags({"--tokens", "--top-logprobs",
                                                                                    "--dump-logits"})),
                          data_parallel_bool_flags(model_bool_flags({})));
  if (!args.ok()) return report_error("score", args.error());
  auto tokens = args->get_int_list("--tokens");
  if (!tokens.ok()) return report_error("score", tokens.error());
  auto top_k = args->get_int("--top-logprobs", 8);
  if (!top_k.ok()) return report_error("score", top_k.error());
  if (*top_k < 1) return report_error("score", Error{"--top-logprobs must be >= 1"});
  LocalRanks ranks;
  auto data_parallel = data_parallel_from_args(*args, argc, argv, ranks);
  if (!data_parallel.ok()) return report_error("score", data_parallel.error());
  auto loaded = load_model_from_args(*args, *data_parallel);
  if (!loaded.ok()) return report_error("score", loaded.error());
  CausalLM& model = *loaded->model;
  if (data_parallel->rank != 0) {
    while (model.run_idle_step()) {
    }
    return 0;
  }
  Generator generator(model, 128, static_cast<int64_t>(tokens->size()));
  auto logits = generator.append(*tokens, true);
  if (!logits.ok()) return report_error("score", logits.error());
  while (model.run_idle_step()) {
  }
  if (auto waited = ranks.wait(); !waited.ok()) return report_error("score", waited.error());
  const int64_t vocab = model.config().vocab_size;
  for (size_t pos = 0; pos < tokens->size(); ++pos) {
    const float* row = logits->data() + pos * static_cast<size_t>(vocab);
    std::printf("{\"pos\":%zu,\"token\":%d,\"top\":[", pos, (*tokens)[pos]);
    const auto top = top_logprobs(row, vocab, static_cast<int32_t>(*top_k));
    for (size_t i = 0; i < top.size(); ++i) {
      std::printf("%s[%d,%.9g]", i == 0 ? "" : ",", top[i].first, top[i].second);
    }
    std::printf("]}\n");
  }
  if (auto path = args->find("--dump-logits")) {
    const float* last = logits->data() + (tokens->size() - 1) * static_cast<size_t>(vocab);
    if (auto written = write_logits(*path, last, vocab); !written.ok()) return report_error("score", written.error());
  }
  return 0;
}

}  // namespace deepinfer::cli
