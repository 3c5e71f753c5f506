// CudaBackend::sample_rows: the device sampler over a workspace the backend keeps between calls;
// take_drawn_tokens, its draws fed to the next step.
#include "kernels/cuda/sampling.h"
#include "runtime/cuda/cuda_backend_impl.h"

namespace deepinfer {

void CudaBackend::sample_rows(const float* logits, int64_t vocab, const kernels::SampleParams* params,
                              int64_t num_draws, int32_t* token_ids) {
  if (num_draws == 0) return;
  DI_CHECK(!capturing_, "sample_rows during graph capture");
  const size_t bytes = kc::sample_rows_workspace_bytes(vocab, num_draws, num_sms_);
  if (sample_workspace_.size_bytes() < bytes) {
    sample_workspace_ = DeviceBuffer();  // the old block first: the stream orders its last user before
    sample_workspace_ = DeviceBuffer(allocator_.allocate(bytes), bytes, [this](void* p) { allocator_.deallocate(p); });
    kc::clear_sample_rows_workspace(sample_workspace_.data(), stream_.for_op());
  }
  kc::sample_rows(logits, vocab, params, num_draws, token_ids, sample_workspace_.data(), num_sms_, stream_.for_op());
}

void CudaBackend::take_drawn_tokens(const int32_t* drawn, const int32_t* draw_of_token, int64_t num_tokens,
                                    int32_t* token_ids) {
  kc::take_drawn_tokens(drawn, draw_of_token, num_tokens, token_ids, stream_.for_op());
}

}  // namespace deepinfer
