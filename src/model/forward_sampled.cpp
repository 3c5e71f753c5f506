// CausalLM::forward_sampled's default: every logit row to the host, then the host sampler.
#include "model/model.h"

namespace deepinfer {

void CausalLM::forward_sampled(const ForwardBatch& batch, const std::vector<kernels::SampleParams>& draws,
                               int32_t* token_ids, const std::vector<int32_t>& /*host_rows*/, float* host_logits) {
  forward(batch, host_logits);
  kernels::cpu::sample_rows(host_logits, config_.vocab_size, draws.data(), static_cast<int64_t>(draws.size()),
                            token_ids);
}

}  // namespace deepinfer
