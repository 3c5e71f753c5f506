// DenseDecoder::forward and forward_sampled: what leaves the backend after a forward pass, all
// the logits or the drawn token ids plus the rows the host still needs.
#include "model/layers/dense_decoder.h"

namespace deepinfer {

void DenseDecoder::forward(const ForwardBatch& batch, float* logits) {
  run_forward(batch);
  if (batch.logit_rows.empty()) return;
  backend_.copy_to_host(logits, logits_.as<float>(),
                        batch.logit_rows.size() * static_cast<size_t>(config_.vocab_size) * sizeof(float));
}

void DenseDecoder::forward_sampled(const ForwardBatch& batch, const std::vector<kernels::SampleParams>& draws,
                                   int32_t* token_ids, const std::vector<int32_t>& host_rows, float* host_logits) {
  const int64_t vocab = config_.vocab_size;
  const auto num_logit_rows = static_cast<int32_t>(batch.logit_rows.size());
  for (const kernels::SampleParams& draw : draws) {
    DI_CHECK(draw.row >= 0 && draw.row < num_logit_rows, "draw of logit row " << draw.row << " out of range");
  }
  run_forward(batch);
  // Sampling runs after the step (a replayed graph included), on the same stream.
  if (!draws.empty()) {
    const size_t params_bytes = draws.size() * sizeof(kernels::SampleParams);
    if (draws_.size_bytes() < params_bytes) {
      // Both made before either is kept: a failed allocation must not leave draws_ grown over a
      // drawn_tokens_ too small for it.
      DeviceBuffer params_buffer = backend_.allocate(params_bytes);
      drawn_tokens_ = backend_.allocate(draws.size() * sizeof(int32_t));
      draws_ = std::move(params_buffer);
    }
    backend_.copy_to_device(draws_.data(), draws.data(), params_bytes);
    backend_.sample_rows(logits_.as<float>(), vocab, draws_.as<kernels::SampleParams>(),
                         static_cast<int64_t>(draws.size()), drawn_tokens_.as<int32_t>());
  }
  // Runs of consecutive rows go in one copy.
  const auto row_bytes = static_cast<size_t>(vocab) * sizeof(float);
  for (size_t begin = 0; begin < host_rows.size();) {
    size_t end = begin + 1;
    while (end < host_rows.size() && host_rows[end] == host_rows[end - 1] + 1) ++end;
    const int32_t first = host_rows[begin];
    DI_CHECK(first >= 0 && host_rows[end - 1] < num_logit_rows, "host logit row out of range");
    backend_.copy_to_host(host_logits + int64_t{first} * vocab, logits_.as<float>() + int64_t{first} * vocab,
                          (end - begin) * row_bytes);
    begin = end;
  }
  if (!draws.empty()) backend_.copy_to_host(token_ids, drawn_tokens_.data(), draws.size() * sizeof(int32_t));
}

}  // namespace deepinfer
