// `deepinfer bench --speculative-tokens K --draft-text FILE`: greedy speculative decoding of one
// sequence at a time with the model's draft module (engine/draft_verifier.h) against plain greedy
// decoding on the same prompts, and the confidence head's calibration per draft depth.
#pragma once

#include "args.h"
#include "session.h"

namespace deepinfer::cli {

// Flags: --speculative-tokens K (drafts a round, >= 1), --draft-text FILE (held-out text; its
// tokens, cut into --draft-prompts prompts of --prompt-tokens tokens), --decode-tokens N per
// prompt. Prints a speculative line and one draft_calibration line per depth. Returns the exit code.
int run_speculative_bench(const Args& args, LoadedModel& loaded);

}  // namespace deepinfer::cli
