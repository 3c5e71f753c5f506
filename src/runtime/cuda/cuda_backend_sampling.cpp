// CudaBackend::sample_rows: the device sampler over a workspace the backend keeps between calls;
// gather_rows, which feeds its draws to the next step.
#include "kernels/cuda/copy_pieces.h"
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

void CudaBackend::gather_rows(const int32_t* src, const int32_t* row_of, int64_t num_rows, int64_t width,
                              int32_t* dst) {
  kc::gather_rows(src, row_of, num_rows, width, dst, stream_.for_op());
}

}  // namespace deepinfer
