// The engine's speculative decoding against the same engine without it: at each concurrency, the
// same greedy requests through EngineCore with drafts off, with DSpark's varlen budget and with
// fixed K, alternating, median of the runs (varlen told the acceptance the warm-up measured); per configuration the tokens a sequence gains per
// step, the verify rows a step, the draft module's share of the time, the ideal speedup, and how
// many outputs equal plain decoding's (all of them with --batch-invariant; otherwise a near-tie
// in a many-row product's bf16 rounding may flip a token, as it may between any two batchings).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "bench_speculative.h"
#include "core/clock.h"
#include "engine/engine_core.h"
#include "sampling/sampler.h"

namespace deepinfer::cli {
namespace {

struct EngineRun {
  double seconds = 0.0;
  int64_t tokens = 0;
  int64_t steps = 0;
  int64_t graph_replays = 0;  // decode steps and draft calls replayed from device graphs
  int64_t overlapped_steps = 0;  // steps launched while the one before them ran (pipelined)
  std::vector<std::vector<int32_t>> outputs;
  std::optional<SpeculativeStats> stats;
};

enum class Mode { kPlain, kVarlen, kFixed };

// Replayed drafts: each request's draft at generated index g is reference[request][g], replaced by
// the next token id with probability corrupt_rate (a draw keyed by the request and position).
struct Replay {
  const std::vector<std::vector<int32_t>>* reference = nullptr;
  double corrupt_rate = 0.0;
};

// prior: the acceptance an earlier run measured (varlen then need not draft to measure it).
EngineRun run_engine_once(CausalLM& model, const std::vector<std::vector<int32_t>>& prompts, int32_t max_tokens,
                          int32_t k, Mode mode, const std::optional<SpeculativeStats>& prior, const Replay& replay,
                          bool pipelined) {
  constexpr int32_t kBlockSize = 16;
  const auto batch = static_cast<int32_t>(prompts.size());
  EngineConfig config;
  config.async_scheduling = pipelined;
  config.block_size = kBlockSize;
  config.enable_prefix_caching = false;  // repeated prompts must not share their KV
  const auto longest = static_cast<int32_t>(prompts.front().size()) + max_tokens + k + 2;
  config.num_kv_blocks = batch * ((longest + kBlockSize - 1) / kBlockSize + 1);
  config.scheduler.max_num_seqs = batch;
  config.scheduler.max_num_batched_tokens = std::max(2048, batch * (k + 1));
  if (mode != Mode::kPlain) {
    config.speculative.num_tokens = k;
    config.speculative.varlen = mode == Mode::kVarlen;
    if (prior) {
      config.speculative.prior_proposed = prior->proposed_per_position;
      config.speculative.prior_accepted = prior->accepted_per_position;
    }
    if (replay.reference != nullptr) {
      const int64_t vocab = model.config().vocab_size;
      config.speculative.draft_source = [&replay, vocab](const Request& r, int32_t max_drafts,
                                                         std::vector<int32_t>& drafts, std::vector<float>& confidences) {
        const std::vector<int32_t>& reference = (*replay.reference)[static_cast<size_t>(r.request_id)];
        for (int32_t j = 0; j < max_drafts; ++j) {
          const auto generated = static_cast<size_t>(r.num_output_tokens() + j);
          if (generated >= reference.size()) break;
          int32_t draft = reference[generated];
          if (deterministic_uniform(static_cast<uint64_t>(r.request_id), r.num_tokens() + j) < replay.corrupt_rate) {
            draft = static_cast<int32_t>((draft + 1) % vocab);
          }
          drafts.push_back(draft);
          confidences.push_back(static_cast<float>(1.0 - replay.corrupt_rate));
        }
      };
    }
  }
  EngineCore engine(model, nullptr, config);
  SamplingParams params;
  params.max_tokens = max_tokens;
  params.ignore_eos = true;
  params.temperature = 0.0;
  for (int32_t i = 0; i < batch; ++i) {
    if (auto added = engine.add_request(i, prompts[static_cast<size_t>(i)], params); !added.ok()) {
      throw std::runtime_error(added.error().message);
    }
  }
  EngineRun run;
  run.outputs.resize(prompts.size());
  const int64_t replays_before = model.num_graph_replays();
  const auto start = std::chrono::steady_clock::now();
  while (engine.has_unfinished_requests()) {
    ++run.steps;
    for (const RequestOutput& out : engine.step()) {
      if (out.failure) throw std::runtime_error(out.failure->message);
      for (const SampleOutput& sample : out.samples) {
        auto& tokens = run.outputs[static_cast<size_t>(out.request_id)];
        tokens.insert(tokens.end(), sample.new_token_ids.begin(), sample.new_token_ids.end());
        run.tokens += static_cast<int64_t>(sample.new_token_ids.size());
      }
    }
  }
  run.seconds = seconds_since(start);
  run.graph_replays = model.num_graph_replays() - replays_before;
  run.stats = engine.stats().speculative;
  run.overlapped_steps = engine.stats().num_overlapped_steps;
  return run;
}

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

}  // namespace

int run_speculative_engine_bench(LoadedModel& loaded, const std::vector<int32_t>& concurrencies,
                                 const std::vector<std::vector<int32_t>>& text_prompts, int32_t k, int32_t max_tokens,
                                 std::optional<double> replay_rate, bool pipelined) {
  CausalLM& model = *loaded.model;
  constexpr int kRuns = 3;
  const Mode modes[] = {Mode::kPlain, Mode::kVarlen, Mode::kFixed};
  const char* names[] = {"plain", "varlen", "fixed"};
  for (int32_t concurrency : concurrencies) {
    std::vector<std::vector<int32_t>> prompts;
    for (int32_t i = 0; i < concurrency; ++i) prompts.push_back(text_prompts[static_cast<size_t>(i) % text_prompts.size()]);
    std::vector<double> rates[3];
    EngineRun last[3];
    try {
      // Run 0 warms up (start-up profile, graph captures) and measures the acceptance of fixed K,
      // which the varlen runs after it start from (summed over fixed K's runs so far), as a
      // long-running server's engine would.
      std::optional<SpeculativeStats> measured;  // fixed K's acceptance, summed over its runs so far
      std::vector<std::vector<int32_t>> reference;
      for (int r = 0; r <= kRuns; ++r) {
        for (int m = 0; m < 3; ++m) {
          if (replay_rate && r == 0 && m == 1) {
            // The replayed drafts' source: the engine's own greedy output with every draft
            // rejected (verify steps' numbers, which on random weights can flip a near-tie
            // against a plain decode step's), from drafts that are all wrong.
            reference = last[0].outputs;
            reference = run_engine_once(model, prompts, max_tokens, k, Mode::kFixed, std::nullopt,
                                        Replay{&reference, 1.0}, pipelined)
                            .outputs;
          }
          const Replay replay{replay_rate ? &reference : nullptr, replay_rate.value_or(0.0)};
          last[m] = run_engine_once(model, prompts, max_tokens, k, modes[m], measured, replay, pipelined);
          if (modes[m] == Mode::kFixed) {
            if (!measured) measured = SpeculativeStats{*last[m].stats};
            for (size_t d = 0; r > 0 && d < measured->proposed_per_position.size(); ++d) {
              measured->proposed_per_position[d] += last[m].stats->proposed_per_position[d];
              measured->accepted_per_position[d] += last[m].stats->accepted_per_position[d];
            }
          }
          if (r > 0) rates[m].push_back(static_cast<double>(last[m].tokens) / last[m].seconds);
        }
      }
    } catch (const std::exception& e) {
      return report_error("bench", Error{e.what()});
    }
    const double plain = median(rates[0]);
    const double plain_step_s = last[0].seconds / static_cast<double>(last[0].steps);
    std::printf(
        "{\"kind\":\"speculative_engine\",\"model\":\"%s\",\"device\":\"%s\",\"drafts_from\":\"%s\","
        "\"corrupt_rate\":%.3f,\"layers\":%lld,\"concurrency\":%lld,\"speculative_tokens\":%d,"
        "\"decode_tokens\":%d,\"runs\":%d,\"pipelined\":%s,\"plain_tok_s\":%.1f",
        model.config().architecture.c_str(), std::string(model.backend().name()).c_str(),
        replay_rate ? "replay" : "draft module", replay_rate.value_or(0.0),
        static_cast<long long>(model.config().num_hidden_layers), static_cast<long long>(concurrency), k, max_tokens,
        kRuns, pipelined ? "true" : "false", plain);
    for (int m = 1; m < 3; ++m) {
      const SpeculativeStats& s = *last[m].stats;
      int64_t verifications = 0;
      int64_t kept = 0;
      for (size_t a = 0; a < s.accepted_length.size(); ++a) {
        verifications += s.accepted_length[a];
        kept += static_cast<int64_t>(a) * s.accepted_length[a];
      }
      // Tokens a sequence gains per step it decodes in, and the draft module's time per step
      // against a plain step: the ideal, E[tokens a step] / (1 + draft cost / step cost).
      const double decode_rows = static_cast<double>(last[m].tokens) - static_cast<double>(kept);
      const double tokens_per_step = decode_rows > 0 ? static_cast<double>(last[m].tokens) / decode_rows : 1.0;
      const double draft_s_per_step = s.draft_seconds / static_cast<double>(last[m].steps);
      const double ideal = tokens_per_step / (1.0 + draft_s_per_step / plain_step_s);
      int64_t identical = 0;
      for (size_t i = 0; i < prompts.size(); ++i) identical += last[m].outputs[i] == last[0].outputs[i] ? 1 : 0;
      const double rate = median(rates[m]);
      std::printf(
          ",\"%s_tok_s\":%.1f,\"%s_speedup\":%.3f,\"%s_ideal\":%.3f,\"%s_tokens_per_step\":%.3f,"
          "\"%s_verify_rows_per_step\":%.2f,\"%s_verifications\":%lld,\"%s_skipped_draft_steps\":%lld,"
          "\"%s_draft_ms_per_step\":%.3f,\"%s_identical_outputs\":%lld,\"%s_steps\":%lld,"
          "\"%s_graph_replays\":%lld,\"%s_overlapped_steps\":%lld",
          names[m], rate, names[m], rate / plain, names[m], ideal, names[m], tokens_per_step, names[m],
          s.verify_steps > 0 ? static_cast<double>(s.verify_rows) / static_cast<double>(s.verify_steps) : 0.0, names[m],
          static_cast<long long>(verifications), names[m], static_cast<long long>(s.skipped_draft_steps), names[m],
          1e3 * draft_s_per_step, names[m], static_cast<long long>(identical), names[m],
          static_cast<long long>(last[m].steps), names[m], static_cast<long long>(last[m].graph_replays), names[m],
          static_cast<long long>(last[m].overlapped_steps));
    }
    // The budget's view at this concurrency: decode, verify (1 + K rows a sequence) and draft times.
    const SpeculativeStats& varlen = *last[1].stats;
    std::printf(",\"varlen_curve_ms\":{\"decode\":%.3f,\"verify\":%.3f,\"draft\":%.3f}",
                1e3 * step_seconds(varlen.decode_curve, concurrency),
                1e3 * step_seconds(varlen.verify_curve, int64_t{concurrency} * (k + 1)),
                1e3 * step_seconds(varlen.draft_curve, concurrency));
    std::printf(
        ",\"plain_ms_per_step\":%.3f,\"plain_steps\":%lld,\"plain_graph_replays\":%lld,"
        "\"plain_overlapped_steps\":%lld}\n",
        1e3 * plain_step_s, static_cast<long long>(last[0].steps), static_cast<long long>(last[0].graph_replays),
        static_cast<long long>(last[0].overlapped_steps));
    std::fflush(stdout);
  }
  return 0;
}

}  // namespace deepinfer::cli
