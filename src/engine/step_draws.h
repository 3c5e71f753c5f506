// Which of a step's logit rows the backend samples (CausalLM::forward_sampled) and which go to
// the host: a row is drawn where the logits are unless something on the host reads or changes it.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

#include "engine/batch_builder.h"
#include "kernels/ops.h"

namespace deepinfer {

struct StepDraws {
  std::vector<kernels::SampleParams> draws;      // the backend's draws, in row order
  std::vector<int32_t> host_rows;                // logit rows copied to the host
  // Per built.rows entry: the index in draws of its first draw (those of its draft rows follow).
  std::vector<std::optional<int32_t>> draw_of;
};

// Prompt-logprob rows always go to the host; a sampling row is sampled there when backend draws
// are off, the request wants a grammar mask or logits processors that change its row, or when
// forks_from_row(request) says held n > 1 samples will sample the same row on the host. A request
// that wants logprobs is drawn on the backend and its row copied too, for the draw's logprobs.
StepDraws plan_step_draws(const BuiltBatch& built, bool backend_draws,
                          const std::function<bool(const Request&)>& forks_from_row);

}  // namespace deepinfer
