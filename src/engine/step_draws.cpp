// plan_step_draws: the split of a step's logit rows between backend draws and host rows.
#include "engine/step_draws.h"

#include "sampling/logits_processor.h"
#include "sampling/sampler.h"

namespace deepinfer {
namespace {

// Rows the host samples: it changes them (logits processors, grammar masks) or reads them
// before any token (max_tokens 0).
bool host_samples(const Request& r) {
  return r.params.max_tokens == 0 || r.params.structured_output ||
         logits_processors_active(r.params, static_cast<size_t>(r.num_output_tokens()));
}

}  // namespace

StepDraws plan_step_draws(const BuiltBatch& built, bool backend_draws,
                          const std::function<bool(const Request&)>& forks_from_row) {
  StepDraws plan;
  plan.draw_of.resize(built.rows.size());
  for (size_t i = 0; i < built.rows.size(); ++i) {
    const ScheduledRows& rows = built.rows[i];
    if (rows.first_logit_row < 0) continue;
    for (int32_t k = 0; k < rows.num_prompt_logprob_rows; ++k) plan.host_rows.push_back(rows.first_logit_row + k);
    if (!rows.samples) continue;
    const int32_t sample_row = rows.first_logit_row + rows.num_prompt_logprob_rows;
    const Request& r = *rows.request;
    const bool on_host = !backend_draws || host_samples(r) || forks_from_row(r);
    // The draws of the golden row and each draft row, as if the drafts before it were accepted.
    for (int32_t d = 0; d <= rows.num_drafts; ++d) {
      if (on_host || r.params.logprobs) plan.host_rows.push_back(sample_row + d);  // a draw's logprobs
      if (on_host) continue;
      if (d == 0) plan.draw_of[i] = static_cast<int32_t>(plan.draws.size());
      plan.draws.push_back(sample_params(r.params, r.seed, r.num_tokens() + d, r.sample_index, sample_row + d));
    }
  }
  return plan;
}

}  // namespace deepinfer
