// DenseDecoder::forward and launch_sampled: what leaves the backend after a forward pass, all
// the logits or the drawn token ids plus the rows the host still needs.
#include "model/layers/dense_decoder.h"

#include <algorithm>

namespace deepinfer {

void DenseDecoder::encode_image(const float* pixels, const ImageGrid& grid, float* rows) {
  DI_CHECK(image_encoder_, "this model has no image encoder");
  image_encoder_->encode(pixels, grid, rows);
}

void DenseDecoder::forward(const ForwardBatch& batch, float* logits) {
  run_forward(batch);
  if (batch.logit_rows.empty()) return;
  backend_.copy_to_host(logits, logits_.as<float>(),
                        batch.logit_rows.size() * static_cast<size_t>(config_.vocab_size) * sizeof(float));
}

std::unique_ptr<PendingCopies> DenseDecoder::launch_sampled(const ForwardBatch& batch,
                                                            const std::vector<kernels::SampleParams>& draws,
                                                            int32_t* token_ids, const std::vector<int32_t>& host_rows,
                                                            float* host_logits) {
  const int64_t vocab = config_.vocab_size;
  const auto num_logit_rows = static_cast<int32_t>(batch.logit_rows.size());
  for (const kernels::SampleParams& draw : draws) {
    DI_CHECK(draw.row >= 0 && draw.row < num_logit_rows, "draw of logit row " << draw.row << " out of range");
  }
  for (int32_t row : host_rows) DI_CHECK(row >= 0 && row < num_logit_rows, "host logit row out of range");
  const kernels::SampleParams* device_draws = run_forward(batch, &draws);
  // Sampling runs after the step (a replayed graph included), on the same stream.
  if (!draws.empty()) {
    const size_t tokens_bytes = draws.size() * sizeof(int32_t);
    // Room for a graph's whole batch at once: the graphs read these draws where they are, so a
    // move makes them be captured again.
    if (drawn_tokens_.size_bytes() < tokens_bytes) {
      drawn_tokens_ = backend_.allocate(std::max(tokens_bytes, size_t{DecodeGraphs::kMaxBatch} * sizeof(int32_t)));
    }
    backend_.sample_rows(logits_.as<float>(), vocab, device_draws, static_cast<int64_t>(draws.size()),
                         drawn_tokens_.as<int32_t>());
  }
  std::vector<HostCopy> copies;
  // Runs of consecutive rows go in one copy.
  const auto row_bytes = static_cast<size_t>(vocab) * sizeof(float);
  for (size_t begin = 0; begin < host_rows.size();) {
    size_t end = begin + 1;
    while (end < host_rows.size() && host_rows[end] == host_rows[end - 1] + 1) ++end;
    const int64_t first = host_rows[begin];
    copies.push_back({host_logits + static_cast<int64_t>(begin) * vocab, logits_.as<float>() + first * vocab,
                      (end - begin) * row_bytes});
    begin = end;
  }
  if (!draws.empty()) copies.push_back({token_ids, drawn_tokens_.data(), draws.size() * sizeof(int32_t)});
  return backend_.copy_to_host_later(copies);
}

}  // namespace deepinfer
