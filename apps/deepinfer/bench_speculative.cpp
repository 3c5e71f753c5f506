// The speculative bench: both decoders alternate over the same prompts, whole calls timed (each
// includes its prompt's forward), outputs compared token for token; then, per draft depth, how
// well the confidence head predicts acceptance: expected calibration error (10 equal bins), AUROC
// (rank statistic, ties counted half) and the Brier score beside that of a constant predictor of
// the depth's acceptance rate.
#include "bench_speculative.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <numeric>
#include <random>
#include <sstream>

#include "core/clock.h"
#include "engine/draft_verifier.h"
#include "engine/generator.h"
#include "session.h"
#include "tokenizer/tokenizer.h"

namespace deepinfer::cli {
namespace {

struct Calibration {
  double acceptance = 0.0;
  double mean_confidence = 0.0;
  double ece = 0.0;
  double auroc = 0.0;  // 0.5 when one class is missing
  double brier = 0.0;
  double brier_constant = 0.0;
};

Calibration calibrate(const DraftStats::Depth& depth) {
  Calibration c;
  const size_t n = depth.accepted.size();
  if (n == 0) return c;
  const auto total = static_cast<double>(n);
  c.acceptance = std::accumulate(depth.accepted.begin(), depth.accepted.end(), 0.0) / total;
  c.mean_confidence = std::accumulate(depth.confidence.begin(), depth.confidence.end(), 0.0) / total;
  constexpr int kBins = 10;
  double bin_count[kBins] = {};
  double bin_confidence[kBins] = {};
  double bin_accepted[kBins] = {};
  for (size_t i = 0; i < n; ++i) {
    const double p = depth.confidence[i];
    const double y = depth.accepted[i];
    const int bin = std::min(kBins - 1, static_cast<int>(p * kBins));
    bin_count[bin] += 1.0;
    bin_confidence[bin] += p;
    bin_accepted[bin] += y;
    c.brier += (p - y) * (p - y);
    c.brier_constant += (c.acceptance - y) * (c.acceptance - y);
  }
  for (int b = 0; b < kBins; ++b) c.ece += std::abs(bin_accepted[b] - bin_confidence[b]) / total;
  c.brier /= total;
  c.brier_constant /= total;
  // AUROC = P(confidence of an accepted draft > that of a rejected one), from the ranks.
  std::vector<size_t> order(n);
  std::iota(order.begin(), order.end(), size_t{0});
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return depth.confidence[a] < depth.confidence[b]; });
  double positive_rank_sum = 0.0;
  for (size_t i = 0; i < n;) {
    size_t j = i;
    while (j < n && depth.confidence[order[j]] == depth.confidence[order[i]]) ++j;
    const double rank = 0.5 * static_cast<double>(i + 1 + j);  // the tie group's mean rank
    for (size_t k = i; k < j; ++k) positive_rank_sum += depth.accepted[order[k]] ? rank : 0.0;
    i = j;
  }
  const double positives = c.acceptance * total;
  const double negatives = total - positives;
  c.auroc = positives > 0 && negatives > 0
                ? (positive_rank_sum - positives * (positives + 1) / 2.0) / (positives * negatives)
                : 0.5;
  return c;
}

// The prompts: cut from --draft-text's tokens, or random token ids (seeded) for replayed drafts.
Result<std::vector<std::vector<int32_t>>> bench_prompts(const Args& args, const CausalLM& model, size_t prompt_len,
                                                        size_t count) {
  std::vector<std::vector<int32_t>> prompts;
  if (!args.has("--draft-text")) {
    std::mt19937 rng(1234);
    std::uniform_int_distribution<int32_t> token(0, static_cast<int32_t>(model.config().vocab_size) - 1);
    for (size_t p = 0; p < count; ++p) {
      std::vector<int32_t>& prompt = prompts.emplace_back(prompt_len);
      for (int32_t& t : prompt) t = token(rng);
    }
    return prompts;
  }
  const std::string text_path = *args.find("--draft-text");
  std::ifstream in(text_path, std::ios::binary);
  if (!in) return Error{"--draft-text: cannot read " + text_path};
  std::stringstream text;
  text << in.rdbuf();
  auto tokenizer = Tokenizer::load(*args.find("--model"));
  if (!tokenizer.ok()) return tokenizer.error();
  auto tokens = tokenizer->encode(text.str());
  if (!tokens.ok()) return tokens.error();
  for (size_t p = 0; p < count && (p + 1) * prompt_len <= tokens->size(); ++p) {
    prompts.emplace_back(tokens->begin() + static_cast<std::ptrdiff_t>(p * prompt_len),
                         tokens->begin() + static_cast<std::ptrdiff_t>((p + 1) * prompt_len));
  }
  if (prompts.empty()) {
    return Error{"--draft-text: " + std::to_string(tokens->size()) + " tokens, fewer than one prompt of " +
                 "--prompt-tokens " + std::to_string(prompt_len)};
  }
  return prompts;
}

}  // namespace

int run_speculative_bench(const Args& args, LoadedModel& loaded) {
  auto drafts = args.get_int("--speculative-tokens", 0);
  auto prompts_wanted = args.get_int("--draft-prompts", 16);
  auto prompt_tokens = args.get_int("--prompt-tokens", 64);
  auto decode_tokens = args.get_int("--decode-tokens", 64);
  for (const auto* value : {&drafts, &prompts_wanted, &prompt_tokens, &decode_tokens}) {
    if (!value->ok()) return report_error("bench", value->error());
    if (**value < 1) {
      return report_error("bench", Error{"--speculative-tokens, --draft-prompts, --prompt-tokens and "
                                         "--decode-tokens must be >= 1"});
    }
  }
  auto replay_rate = args.get_double("--draft-replay", -1.0);
  if (!replay_rate.ok()) return report_error("bench", replay_rate.error());
  const bool replay = args.has("--draft-replay");
  if (replay && !(*replay_rate >= 0.0 && *replay_rate <= 1.0)) {
    return report_error("bench", Error{"--draft-replay: a corruption rate in [0, 1]"});
  }
  CausalLM& model = *loaded.model;
  if (!replay && model.num_draft_modules() == 0) {
    return report_error("bench", Error{"--speculative-tokens: the model has no draft module (an MTP layer, "
                                       "num_nextn_predict_layers >= 1); --draft-replay RATE replays drafts instead"});
  }
  const auto prompt_len = static_cast<size_t>(*prompt_tokens);
  auto prompts = bench_prompts(args, model, prompt_len, static_cast<size_t>(*prompts_wanted));
  if (!prompts.ok()) return report_error("bench", prompts.error());
  const size_t num_prompts = prompts->size();
  if (!args.has("--concurrency") && (args.has("--async-scheduling") || args.has("--no-async-scheduling"))) {
    return report_error("bench", Error{"--[no-]async-scheduling with --speculative-tokens takes --concurrency (the "
                                       "engine); one sequence at a time has no step loop"});
  }
  if (args.has("--concurrency")) {
    auto concurrency = args.get_int_list("--concurrency");
    if (!concurrency.ok()) return report_error("bench", concurrency.error());
    for (int32_t c : *concurrency) {
      if (c < 1) return report_error("bench", Error{"--concurrency takes counts >= 1, like 1,16,64,256"});
    }
    if (*drafts > 16) return report_error("bench", Error{"--speculative-tokens must be in [1, 16]"});
    auto pipelined = async_scheduling_from_args(args);
    if (!pipelined.ok()) return report_error("bench", pipelined.error());
    return run_speculative_engine_bench(loaded, *concurrency, *prompts, static_cast<int32_t>(*drafts),
                                        static_cast<int32_t>(*decode_tokens),
                                        replay ? std::optional<double>(*replay_rate) : std::nullopt, *pipelined);
  }

  const auto k = static_cast<int32_t>(*drafts);
  const auto max_tokens = static_cast<int32_t>(*decode_tokens);
  const auto max_seq = static_cast<int32_t>(prompt_len) + max_tokens + k + 1;
  GenerateOptions greedy;
  greedy.max_tokens = max_tokens;
  greedy.ignore_eos = true;
  greedy.sampling.temperature = 0.0;
  DraftStats stats;
  DraftStats warm_up;
  double plain_seconds = 0.0;
  double speculative_seconds = 0.0;
  int64_t generated = 0;
  bool identical = true;
  for (size_t p = 0; p <= num_prompts; ++p) {  // prompt 0 twice: the first pass warms up
    const std::vector<int32_t>& prompt = (*prompts)[p == 0 ? 0 : p - 1];
    Generator plain(model, 16, max_seq);
    auto start = std::chrono::steady_clock::now();
    auto want = plain.generate(prompt, greedy);
    const double plain_s = seconds_since(start);
    if (!want.ok()) return report_error("bench", want.error());
    DraftVerifier verifier(model, max_seq);
    // Replayed drafts come from the verifier's own greedy output with every draft rejected (a
    // verify forward's numbers, which on random weights flip near-ties against a decode step's).
    DraftReplay replayed{*want, 1.0, p};
    if (replay) {
      DraftStats untimed;
      auto reference = verifier.generate(prompt, greedy, k, &untimed, &replayed);
      if (!reference.ok()) return report_error("bench", reference.error());
      replayed = DraftReplay{*reference, *replay_rate, p};
    }
    start = std::chrono::steady_clock::now();
    auto got = verifier.generate(prompt, greedy, k, p == 0 ? &warm_up : &stats, replay ? &replayed : nullptr);
    const double speculative_s = seconds_since(start);
    if (!got.ok()) return report_error("bench", got.error());
    if (p == 0) continue;
    plain_seconds += plain_s;
    speculative_seconds += speculative_s;
    generated += static_cast<int64_t>(want->size());
    identical = identical && *got == *want;
  }

  const auto rounds = static_cast<double>(stats.rounds);
  double kept = 0.0;
  std::string histogram;
  for (size_t a = 0; a < stats.accepted_per_round.size(); ++a) {
    kept += static_cast<double>(a + 1) * static_cast<double>(stats.accepted_per_round[a]);
    if (a > 0) histogram += ',';
    histogram += std::to_string(stats.accepted_per_round[a]);
  }
  const double tokens_per_round = kept / rounds;
  const double plain_s_per_token = plain_seconds / static_cast<double>(generated);
  const double draft_s_per_round = stats.draft_seconds / rounds;
  // The ideal: tokens a round over the round's cost in plain steps, verification as one.
  const double ideal = tokens_per_round / (1.0 + draft_s_per_round / plain_s_per_token);
  const double speedup = plain_seconds / speculative_seconds;
  std::printf(
      "{\"kind\":\"speculative\",\"model\":\"%s\",\"device\":\"%s\",\"drafts_from\":\"%s\","
      "\"corrupt_rate\":%.3f,\"speculative_tokens\":%d,\"prompts\":%zu,"
      "\"prompt_tokens\":%zu,\"decode_tokens\":%d,\"plain_tok_s\":%.2f,\"speculative_tok_s\":%.2f,"
      "\"speedup\":%.3f,\"ideal_speedup\":%.3f,\"of_ideal\":%.3f,\"tokens_per_round\":%.3f,"
      "\"accepted_per_round\":[%s],\"plain_ms_per_token\":%.4f,\"draft_ms_per_round\":%.4f,"
      "\"verify_ms_per_round\":%.4f,\"identical_outputs\":%s}\n",
      model.config().architecture.c_str(), std::string(model.backend().name()).c_str(),
      replay ? "replay" : "draft module", replay ? *replay_rate : 0.0, k, num_prompts, prompt_len,
      max_tokens, static_cast<double>(generated) / plain_seconds, static_cast<double>(generated) / speculative_seconds,
      speedup, ideal, speedup / ideal, tokens_per_round, histogram.c_str(), 1e3 * plain_s_per_token,
      1e3 * draft_s_per_round, 1e3 * stats.verify_seconds / rounds, identical ? "true" : "false");
  for (size_t d = 0; d < stats.depths.size() && !replay; ++d) {
    const DraftStats::Depth& depth = stats.depths[d];
    const Calibration c = calibrate(depth);
    std::printf(
        "{\"kind\":\"draft_calibration\",\"depth\":%zu,\"drafts\":%zu,\"acceptance\":%.4f,\"mean_confidence\":%.4f,"
        "\"ece\":%.4f,\"auroc\":%.4f,\"brier\":%.4f,\"brier_constant\":%.4f}\n",
        d + 1, depth.accepted.size(), c.acceptance, c.mean_confidence, c.ece, c.auroc, c.brier, c.brier_constant);
  }
  return identical ? 0 : 1;
}

}  // namespace deepinfer::cli
