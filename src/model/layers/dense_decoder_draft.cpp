// DenseDecoder::forward_draft: DeepSeek-V3's multi-token-prediction module as the draft model of
// speculative decoding. Row t: x = eh_proj([enorm(embed(token t)); hnorm(h)]), then the module's
// decoder block over its own KV cache, giving the module output y; logits of the token two past
// the hidden state's position are shared_head(shared_head.norm(y)), the confidence is
// sigmoid(confidence_head(y)) (the default model's README has the definitions).
#include <algorithm>
#include <cmath>

#include "core/check.h"
#include "model/layers/dense_decoder.h"

namespace deepinfer {

void DenseDecoder::forward_draft(const ForwardBatch& batch, const std::vector<int32_t>& hidden_rows, DraftInput input,
                                 const DraftOutputs& outputs) {
  DI_CHECK(!mtp_layers_.empty(), "this model has no draft module (num_draft_modules() is 0)");
  const MtpLayerWeights& mtp = mtp_layers_.back();
  DI_CHECK(!mtp.block.pre_feedforward_norm, "a draft module with sandwich norms");
  const int64_t n = batch.num_tokens();
  const int64_t hidden = config_.hidden_size;
  const auto num_logit_rows = static_cast<int64_t>(batch.logit_rows.size());
  DI_CHECK(n > 0 && hidden_rows.size() == static_cast<size_t>(n), "forward_draft needs one hidden row per token");
  const bool main = input == DraftInput::kMainHidden;
  const int64_t source_rows = main ? workspace_tokens_ : draft_capacity_;
  for (int32_t row : hidden_rows) {
    DI_CHECK(row >= 0 && row < source_rows, "hidden row " << row << " of " << source_rows);
  }
  DI_CHECK(num_logit_rows <= n, "more logit rows than tokens");
  for (int32_t row : batch.logit_rows) DI_CHECK(row >= 0 && row < n, "logit row " << row << " out of range");
  const auto floats = [](int64_t count) { return static_cast<size_t>(count) * sizeof(float); };

  // The hidden states first: the buffers below may move, the main model's among them.
  if (n > static_cast<int64_t>(draft_rows_.size_bytes() / sizeof(int32_t))) {
    draft_rows_ = backend_.allocate(static_cast<size_t>(n) * sizeof(int32_t));
    draft_hidden_ = backend_.allocate(floats(n * hidden));
    draft_joined_ = backend_.allocate(floats(2 * n * hidden));
  }
  backend_.copy_to_device(draft_rows_.data(), hidden_rows.data(), hidden_rows.size() * sizeof(int32_t));
  const float* source = main ? normed_.as<float>() : draft_out_.as<float>();
  backend_.embedding(kernels::WeightView{source, DType::kF32, source_rows, hidden}, draft_rows_.as<int32_t>(), n,
                     draft_hidden_.as<float>());
  if (n > draft_capacity_) {
    draft_out_ = backend_.allocate(floats(n * hidden));
    draft_confidence_ = backend_.allocate(floats(n));
    draft_capacity_ = n;
  }
  ensure_workspace(n, std::max<int64_t>(num_logit_rows, 1));
  if (draft_kv_shape_.num_blocks != kv_shape_.num_blocks || draft_kv_shape_.block_size != kv_shape_.block_size) {
    std::visit([&](auto& a) { a.allocate_kv_cache(backend_, kv_shape_); }, mtp_layers_.back().block.attention);
    draft_kv_shape_ = kv_shape_;
  }

  // Argmax drafts are greedy draws, made where the logits are.
  std::vector<kernels::SampleParams> argmax_draws;
  if (outputs.tokens != nullptr) {
    for (int64_t r = 0; r < num_logit_rows; ++r) {
      kernels::SampleParams draw;
      draw.row = static_cast<int32_t>(r);
      draw.top_k = 1;
      draw.temperature = 0.0;
      argmax_draws.push_back(draw);
    }
  }
  StepExtras extras;
  extras.draws = &argmax_draws;
  const DeviceBatch device = draft_inputs_.upload(backend_, batch, kv_shape_.block_size, extras);
  auto* residual = hidden_.as<float>();
  auto* normed = normed_.as<float>();
  auto* delta = delta_.as<float>();
  auto* scratch = scratch_.as<float>();
  auto* joined = draft_joined_.as<float>();
  auto* out = draft_out_.as<float>();
  backend_.embedding(mtp.embed_tokens.value_or(embed_tokens_), device.token_ids.as<int32_t>(), n, residual);
  mtp.enorm.forward(backend_, residual, n, normed);
  mtp.hnorm.forward(backend_, draft_hidden_.as<float>(), n, delta);
  backend_.copy_rows(normed, hidden, n, hidden, joined, 2 * hidden);
  backend_.copy_rows(delta, hidden, n, hidden, joined + hidden, 2 * hidden);
  mtp.eh_proj.forward(backend_, joined, n, residual);

  const DecoderLayer& block = mtp.block;
  block.input_norm.forward(backend_, residual, n, normed);
  std::visit([&](const auto& a) { a.forward(backend_, device, normed, scratch, delta); }, block.attention);
  block.post_attention_norm.add_forward(backend_, residual, delta, n, normed);
  std::visit([&](const auto& f) { f.forward(backend_, normed, n, scratch, delta); }, block.ffn);
  backend_.add(residual, delta, n * hidden, out);
  if (num_logit_rows == 0) return;

  // The logit rows' outputs, together (a gather), then their logits, drafts and confidences.
  auto* rows_out = logit_hidden_.as<float>();
  if (num_logit_rows > static_cast<int64_t>(draft_logit_rows_.size_bytes() / sizeof(int32_t))) {
    draft_logit_rows_ = backend_.allocate(static_cast<size_t>(num_logit_rows) * sizeof(int32_t));
    draft_tokens_ = backend_.allocate(static_cast<size_t>(num_logit_rows) * sizeof(int32_t));
  }
  backend_.copy_to_device(draft_logit_rows_.data(), batch.logit_rows.data(), batch.logit_rows.size() * sizeof(int32_t));
  backend_.embedding(kernels::WeightView{out, DType::kF32, n, hidden}, draft_logit_rows_.as<int32_t>(), num_logit_rows,
                     rows_out);
  mtp.shared_head_norm.forward(backend_, rows_out, num_logit_rows, normed);
  backend_.matmul(normed, mtp.shared_head, kernels::WeightView{}, num_logit_rows, logits_.as<float>());
  if (outputs.logits != nullptr) {
    backend_.copy_to_host(outputs.logits, logits_.as<float>(), floats(num_logit_rows * config_.vocab_size));
  }
  if (outputs.tokens != nullptr) {
    backend_.sample_rows(logits_.as<float>(), config_.vocab_size, device.draws, num_logit_rows,
                         draft_tokens_.as<int32_t>());
    backend_.copy_to_host(outputs.tokens, draft_tokens_.data(), static_cast<size_t>(num_logit_rows) * sizeof(int32_t));
  }
  if (outputs.confidence == nullptr || !mtp.confidence_head) return;
  mtp.confidence_head->forward(backend_, rows_out, num_logit_rows, draft_confidence_.as<float>());
  backend_.copy_to_host(outputs.confidence, draft_confidence_.data(), floats(num_logit_rows));
  for (int64_t r = 0; r < num_logit_rows; ++r) outputs.confidence[r] = 1.0f / (1.0f + std::exp(-outputs.confidence[r]));
}

}  // namespace deepinfer
