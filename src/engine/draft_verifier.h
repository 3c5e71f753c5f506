// DraftVerifier: speculative decoding of one sequence with the model's draft module
// (CausalLM::forward_draft, DeepSeek's MTP), over a KV cache of its own: each round drafts a chain
// of up to K tokens (each the draft module's argmax), verifies them in one forward of the main
// model, keeps the drafts up to the first that differs from the main model's own choice there plus
// that choice, and catches the draft module's cache up on the kept positions. The main model's
// choice at each row is what plain decoding (Generator) draws at that position: the argmax, or for
// a sampled request the draw keyed by (seed, position); a draft is kept exactly when it is that
// token, so the output is plain decoding's, token for token (argmax drafts make sampling the
// target and accepting on a match exact).
// It measures what the engine's speculative decoding (issue 22) will schedule by: per draft
// depth, the confidence head's estimate and whether the draft was accepted given that every
// earlier draft of its chain was. Not thread-safe.
#pragma once

#include <cstdint>
#include <vector>

#include "core/result.h"
#include "engine/generator.h"
#include "model/model.h"

namespace deepinfer {

struct DraftStats {
  int32_t rounds = 0;           // main-model forwards after the prompt
  int32_t draft_forwards = 0;   // forward_draft calls
  double verify_seconds = 0.0;  // wall time in those main-model forwards
  double draft_seconds = 0.0;   // and in forward_draft (both return with their results on the host)
  // accepted_per_round[a]: rounds that kept a drafts (0 .. K).
  std::vector<int64_t> accepted_per_round;
  // Per depth k (index k - 1): drafts verified at that depth (those whose earlier drafts were all
  // accepted), and for each its confidence and whether it was accepted.
  struct Depth {
    std::vector<float> confidence;
    std::vector<uint8_t> accepted;
  };
  std::vector<Depth> depths;
};

// Replayed drafts instead of the draft module's (issue 22's replay mode, for models whose random
// weights draft nothing useful): the draft of the token at generated index g is tokens[g] (a
// plain run's output for the same prompt), replaced by the next token id with probability
// corrupt_rate (a draw keyed by seed and position). Drafts cost nothing; their confidence is
// 1 - corrupt_rate.
struct DraftReplay {
  std::vector<int32_t> tokens;
  double corrupt_rate = 0.0;
  uint64_t seed = 0;
};

class DraftVerifier {
 public:
  // max_seq_tokens: the longest sequence, drafts included.
  DraftVerifier(CausalLM& model, int32_t max_seq_tokens, int32_t block_size = 16);

  // Generator::generate's continuation of prompt under options (max_tokens, sampling with
  // sampling.seed or 0, stop ids), drafting num_drafts tokens a round (>= 1) with the draft
  // module, or from *replay when given; stats accumulate into *stats.
  Result<std::vector<int32_t>> generate(const std::vector<int32_t>& prompt, const GenerateOptions& options,
                                        int32_t num_drafts, DraftStats* stats, const DraftReplay* replay = nullptr);

 private:
  CausalLM& model_;
  int32_t block_size_;
  int32_t num_blocks_;
  int32_t max_seq_tokens_;
};

}  // namespace deepinfer
