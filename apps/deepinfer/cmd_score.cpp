// `deepinfer score`: top-k logprobs at every position of a token sequence, as JSON lines; with
// --kl-reference, how far they are from a reference model's.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <optional>

#include "commands.h"
#include "data_parallel_flags.h"
#include "engine/generator.h"
#include "sampling/logprobs.h"
#include "session.h"

namespace deepinfer::cli {
namespace {

constexpr const char* kUsage =
    R"(usage: deepinfer score --model DIR --tokens 1,2,3 [--top-logprobs K] [--dump-logits FILE]
                       [--device cpu|ref|cuda] [--threads N] [--batch-invariant] [--dequantize-weights]
                       [--kv-cache-dtype auto|float32|bfloat16|fp8]
                       [--kl-reference DIR [--kl-reference-dequantized] [--kl-reference-kv-cache-dtype T]]
                       [--data-parallel-size N --expert-parallel [--num-redundant-experts R]
                        [--expert-placement FILE] [--eplb-interval N] [--eplb-window N]
                        [--eplb-policy peak-aware|deepseek] [--expert-placement-out FILE]]
Prints one JSON object per input position i: {"pos":i,"token":id,"top":[[id,logprob],...]} where
logprobs are the log-softmax over the full vocabulary of the logits at position i (predicting
token i+1), top K (default 8) by logprob descending. --dump-logits writes the last position's raw
logits as little-endian float32. --kv-cache-dtype: as deepinfer serve --help says.
--dequantize-weights: FP8 and MXFP4 checkpoints load dequantised instead of packed.
--kl-reference DIR: after --model, the same tokens go through the model in DIR (the same
vocabulary; DIR may be --model itself), loaded with the same flags but --dequantize-weights and
--kv-cache-dtype: --kl-reference-dequantized loads it dequantised (a packed checkpoint against its
own dequantisation) and --kl-reference-kv-cache-dtype T gives its KV cache type (default auto).
Each line then adds "kl", KL(reference || model) over the full vocabulary in nats, and
"reference_top", the reference's most likely [id, logprob]; a last line sums them up:
{"summary":"kl","positions":N,"kl_mean":..,"kl_median":..,"kl_p99":..,"kl_max":..,"top1_agreement":..,
"reference_entropy_mean":..,"ppl":..,"reference_ppl":..} (top1_agreement: the fraction of positions
whose most likely token is the reference's; reference_entropy_mean: the reference distributions'
mean entropy in nats, ln of the vocabulary size when flat, against which to read the KL; ppl and
reference_ppl: each model's perplexity of the tokens, exp of the mean negative logprob of each
next token).
Not with --data-parallel-size.
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

// The reference's logits for tokens ([tokens, vocab]): DIR loaded with args' flags but the
// --kl-reference-* ones, on one rank.
Result<std::vector<float>> reference_logits(const Args& args, const std::vector<int32_t>& tokens, int64_t vocab) {
  const std::optional<std::string> dequantized =
      args.has("--kl-reference-dequantized") ? std::optional<std::string>("") : std::nullopt;
  const Args reference = args.with("--model", args.find("--kl-reference"))
                             .with("--dequantize-weights", dequantized)
                             .with("--kv-cache-dtype", args.find("--kl-reference-kv-cache-dtype"));
  auto loaded = load_model_from_args(reference, DataParallelConfig{});
  if (!loaded.ok()) return Error{"--kl-reference: " + loaded.error().message};
  const int64_t reference_vocab = loaded->model->config().vocab_size;
  if (reference_vocab != vocab) {
    return Error{"--kl-reference: its vocabulary has " + std::to_string(reference_vocab) + " tokens, --model's " +
                 std::to_string(vocab)};
  }
  Generator generator(*loaded->model, 128, static_cast<int64_t>(tokens.size()));
  return generator.append(tokens, true);
}

// What --kl-reference sums over the positions: each one's KL, how many top-1 ids agreed, the
// reference's entropies and both models' negative log-likelihoods of the next token (the last
// position has none).
struct KlTally {
  std::vector<double> kl;
  size_t top1_agreed = 0;
  double reference_entropy = 0.0;
  double nll = 0.0;
  double reference_nll = 0.0;
  size_t predicted = 0;
};

void print_kl_summary(KlTally tally) {
  std::vector<double>& kl = tally.kl;
  const size_t n = kl.size();
  double sum = 0.0;
  for (double v : kl) sum += v;
  std::sort(kl.begin(), kl.end());
  const auto quantile = [&](double q) { return kl[std::min(n - 1, static_cast<size_t>(q * static_cast<double>(n)))]; };
  const auto perplexity = [&](double nll) {
    return tally.predicted == 0 ? 0.0 : std::exp(nll / static_cast<double>(tally.predicted));
  };
  std::printf(
      "{\"summary\":\"kl\",\"positions\":%zu,\"kl_mean\":%.9g,\"kl_median\":%.9g,\"kl_p99\":%.9g,\"kl_max\":%.9g,"
      "\"top1_agreement\":%.9g,\"reference_entropy_mean\":%.9g,\"ppl\":%.9g,\"reference_ppl\":%.9g}\n",
      n, sum / static_cast<double>(n), quantile(0.5), quantile(0.99), kl.back(),
      static_cast<double>(tally.top1_agreed) / static_cast<double>(n), tally.reference_entropy / static_cast<double>(n),
      perplexity(tally.nll), perplexity(tally.reference_nll));
}

}  // namespace

int run_score(int argc, char** argv) {
  if (wants_help(argc, argv, kUsage)) return 0;
  auto args =
      Args::parse(argc, argv,
                  data_parallel_value_flags(model_value_flags({"--tokens", "--top-logprobs", "--dump-logits",
                                                               "--kl-reference", "--kl-reference-kv-cache-dtype"})),
                  data_parallel_bool_flags(model_bool_flags({"--kl-reference-dequantized"})));
  if (!args.ok()) return report_error("score", args.error());
  auto tokens = args->get_int_list("--tokens");
  if (!tokens.ok()) return report_error("score", tokens.error());
  auto top_k = args->get_int("--top-logprobs", 8);
  if (!top_k.ok()) return report_error("score", top_k.error());
  if (*top_k < 1) return report_error("score", Error{"--top-logprobs must be >= 1"});
  const bool with_reference = args->has("--kl-reference");
  if (!with_reference && (args->has("--kl-reference-dequantized") || args->has("--kl-reference-kv-cache-dtype"))) {
    return report_error("score",
                        Error{"--kl-reference-dequantized and --kl-reference-kv-cache-dtype need --kl-reference"});
  }
  // Checked before any rank starts.
  if (with_reference && args->has("--data-parallel-size")) {
    return report_error("score", Error{"--kl-reference runs on one rank: drop --data-parallel-size"});
  }
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
  std::vector<float> logits;
  {
    Generator generator(model, 128, static_cast<int64_t>(tokens->size()));
    auto got = generator.append(*tokens, true);
    if (!got.ok()) return report_error("score", got.error());
    logits = std::move(*got);
  }
  while (model.run_idle_step()) {
  }
  if (auto waited = ranks.wait(); !waited.ok()) return report_error("score", waited.error());
  const int64_t vocab = model.config().vocab_size;
  std::vector<float> reference;
  if (with_reference) {
    // One model at a time on the device: the reference may be the same checkpoint at twice the bytes.
    loaded->model.reset();
    loaded->backend.reset();
    auto got = reference_logits(*args, *tokens, vocab);
    if (!got.ok()) return report_error("score", got.error());
    reference = std::move(*got);
  }
  KlTally tally;
  for (size_t pos = 0; pos < tokens->size(); ++pos) {
    const float* row = logits.data() + pos * static_cast<size_t>(vocab);
    std::printf("{\"pos\":%zu,\"token\":%d,\"top\":[", pos, (*tokens)[pos]);
    const auto top = top_logprobs(row, vocab, static_cast<int32_t>(*top_k));
    for (size_t i = 0; i < top.size(); ++i) {
      std::printf("%s[%d,%.9g]", i == 0 ? "" : ",", top[i].first, top[i].second);
    }
    std::printf("]");
    if (with_reference) {
      const float* reference_row = reference.data() + pos * static_cast<size_t>(vocab);
      const auto reference_top = top_logprobs(reference_row, vocab, 1);
      tally.kl.push_back(kl_divergence(reference_row, row, vocab));
      tally.reference_entropy += entropy(reference_row, vocab);
      tally.top1_agreed += reference_top[0].first == top[0].first ? 1 : 0;
      if (pos + 1 < tokens->size()) {
        const int32_t next = (*tokens)[pos + 1];
        tally.nll -= token_logprob(row, vocab, next, 0).logprob;
        tally.reference_nll -= token_logprob(reference_row, vocab, next, 0).logprob;
        ++tally.predicted;
      }
      std::printf(",\"kl\":%.9g,\"reference_top\":[%d,%.9g]", tally.kl.back(), reference_top[0].first,
                  reference_top[0].second);
    }
    std::printf("}\n");
  }
  if (with_reference) print_kl_summary(std::move(tally));
  if (auto path = args->find("--dump-logits")) {
    const float* last = logits.data() + (tokens->size() - 1) * static_cast<size_t>(vocab);
    if (auto written = write_logits(*path, last, vocab); !written.ok()) return report_error("score", written.error());
  }
  return 0;
}

}  // namespace deepinfer::cli
