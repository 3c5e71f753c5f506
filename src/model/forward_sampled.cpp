// CausalLM::launch_sampled's default: every logit row to the host, then the host sampler.
#include "model/model.h"

#include <algorithm>

namespace deepinfer {

std::unique_ptr<PendingCopies> CausalLM::launch_sampled(const ForwardBatch& batch,
                                                        const std::vector<kernels::SampleParams>& draws,
                                                        int32_t* token_ids, const std::vector<int32_t>& host_rows,
                                                        float* host_logits) {
  DI_CHECK(batch.token_from_draw.empty(), "this model takes no tokens from earlier draws (token_from_draw)");
  const auto vocab = static_cast<size_t>(config_.vocab_size);
  std::vector<float> logits(batch.logit_rows.size() * vocab);
  forward(batch, logits.data());
  kernels::cpu::sample_rows(logits.data(), config_.vocab_size, draws.data(), static_cast<int64_t>(draws.size()),
                            token_ids);
  for (size_t i = 0; i < host_rows.size(); ++i) {
    std::copy_n(logits.data() + static_cast<size_t>(host_rows[i]) * vocab, vocab, host_logits + i * vocab);
  }
  return backend_.copy_to_host_later({});
}

}  // namespace deepinfer
