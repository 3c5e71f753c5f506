// `deepinfer bench --speculative-tokens K --draft-text FILE`: greedy speculative decoding of one
// sequence at a time with the model's draft module (engine/draft_verifier.h) against plain greedy
// decoding on the same prompts, and the confidence head's calibration per draft depth.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "args.h"
#include "session.h"

namespace deepinfer::cli {

// Flags: --speculative-tokens K (drafts a round, >= 1), --draft-text FILE (held-out text; its
// tokens, cut into --draft-prompts prompts of --prompt-tokens tokens), --decode-tokens N per
// prompt. Prints a speculative line and one draft_calibration line per depth. Returns the exit code.
// With --concurrency LIST: the engine's speculative decoding instead (run_speculative_engine_bench).
int run_speculative_bench(const Args& args, LoadedModel& loaded);

// The engine at each concurrency (that many requests of prompts, reused in turn): drafts off, K
// drafts with --spec-varlen on, and with it off; one speculative_engine line each. replay_rate:
// drafts replayed from the plain run's outputs, corrupted at that rate, instead of the module's.
// pipelined: every engine with EngineConfig::async_scheduling (the default on CUDA, as serve runs).
int run_speculative_engine_bench(LoadedModel& loaded, const std::vector<int32_t>& concurrencies,
                                 const std::vector<std::vector<int32_t>>& prompts, int32_t k, int32_t max_tokens,
                                 std::optional<double> replay_rate, bool pipelined);

}  // namespace deepinfer::cli
