// DenseDecoder::forward_draft: DeepSeek-V3's multi-token-prediction module as the draft model of
// speculative decoding. Row t: x = eh_proj([enorm(embed(token t)); hnorm(h)]), then the module's
// decoder block over its own KV cache, giving the module output y; logits of the token two past
// the hidden state's position are shared_head(shared_head.norm(y)), the confidence is
// sigmoid(confidence_head(y)) (the default model's README has the definitions). A decode-shaped
// call (one token per sequence, every row's draft wanted) replays a captured graph of its own, as
// decode steps do (model/decode_graphs.h).
#include <algorithm>
#include <cmath>

#include "core/check.h"
#include "model/layers/dense_decoder.h"

namespace deepinfer {

void DenseDecoder::ensure_draft_buffers(int64_t rows) {
  if (rows <= draft_capacity_) return;
  if (draft_graphs_) draft_graphs_->clear();  // they point into the old buffers
  const auto floats = [](int64_t count) { return static_cast<size_t>(count) * sizeof(float); };
  const auto ints = [](int64_t count) { return static_cast<size_t>(count) * sizeof(int32_t); };
  draft_rows_ = backend_.allocate(ints(rows));
  draft_hidden_ = backend_.allocate(floats(rows * config_.hidden_size));
  draft_joined_ = backend_.allocate(floats(2 * rows * config_.hidden_size));
  draft_confidence_ = backend_.allocate(floats(rows));
  draft_logit_rows_ = backend_.allocate(ints(rows));
  draft_tokens_ = backend_.allocate(ints(rows));
  // draft_out_ is last: it may be this call's source (kDraftOutput), gathered before it moves.
  draft_capacity_ = rows;
}

void DenseDecoder::forward_draft(const ForwardBatch& batch, const std::vector<int32_t>& hidden_rows, DraftInput input,
                                 const DraftOutputs& outputs) {
  DI_CHECK(!mtp_layers_.empty(), "this model has no draft module (num_draft_modules() is 0)");
  const MtpLayerWeights& mtp = mtp_layers_.back();
  DI_CHECK(!mtp.block.pre_feedforward_norm, "a draft module with sandwich norms");
  const int64_t n = batch.num_tokens();
  const int64_t hidden = config_.hidden_size;
  DI_CHECK(n > 0 && hidden_rows.size() == static_cast<size_t>(n), "forward_draft needs one hidden row per token");
  const bool main = input == DraftInput::kMainHidden;
  const int64_t source_rows = main ? workspace_tokens_ : draft_out_rows_;
  for (int32_t row : hidden_rows) {
    DI_CHECK(row >= 0 && row < source_rows, "hidden row " << row << " of " << source_rows);
  }
  DI_CHECK(batch.logit_rows.size() <= static_cast<size_t>(n), "more logit rows than tokens");
  for (int32_t row : batch.logit_rows) DI_CHECK(row >= 0 && row < n, "logit row " << row << " out of range");
  if (expert_parallel_) join_group_forward(GroupForward::kDraftModule, n);
  const auto floats = [](int64_t count) { return static_cast<size_t>(count) * sizeof(float); };
  const int64_t padded = DecodeGraphs::can_run(batch) ? DecodeGraphs::shape_for(batch).num_seqs : 0;
  const bool graphed = draft_graphs_ != nullptr && padded > 0 &&
                       std::none_of(mtp_layers_.begin(), mtp_layers_.end(),
                                    [&](const MtpLayerWeights& mtp) { return reads_back(mtp.block.ffn, padded); });
  // A graph's rows: the batch padded to its shape, every row's draft taken.
  const int64_t rows = graphed ? padded : n;
  const int64_t num_logit_rows = graphed ? rows : static_cast<int64_t>(batch.logit_rows.size());

  // The hidden states first, before any buffer below moves (the main model's among them); padded
  // rows read row 0.
  ensure_draft_buffers(rows);
  std::vector<int32_t> source_of_row(hidden_rows);
  source_of_row.resize(static_cast<size_t>(rows), 0);
  backend_.copy_to_device(draft_rows_.data(), source_of_row.data(), source_of_row.size() * sizeof(int32_t));
  const float* source = main ? normed_.as<float>() : draft_out_.as<float>();
  backend_.embedding(kernels::WeightView{source, DType::kF32, source_rows, hidden}, draft_rows_.as<int32_t>(), rows,
                     draft_hidden_.as<float>());
  if (rows > draft_out_rows_) {
    if (draft_graphs_) draft_graphs_->clear();
    draft_out_ = backend_.allocate(floats(rows * hidden));
    draft_out_rows_ = rows;
  }
  ensure_workspace(rows, std::max<int64_t>(num_logit_rows, 1));
  if (draft_kv_shape_.num_blocks != kv_shape_.num_blocks || draft_kv_shape_.block_size != kv_shape_.block_size) {
    if (draft_graphs_) draft_graphs_->clear();
    std::visit([&](auto& a) { a.allocate_kv_cache(backend_, kv_shape_); }, mtp_layers_.back().block.attention);
    draft_kv_shape_ = kv_shape_;
  }

  // Argmax drafts are greedy draws, made where the logits are.
  std::vector<kernels::SampleParams> argmax_draws(static_cast<size_t>(num_logit_rows));
  for (int64_t r = 0; r < num_logit_rows; ++r) {
    argmax_draws[static_cast<size_t>(r)].row = static_cast<int32_t>(r);
    argmax_draws[static_cast<size_t>(r)].top_k = 1;
    argmax_draws[static_cast<size_t>(r)].temperature = 0.0;
  }
  StepExtras extras;
  extras.draws = &argmax_draws;
  const kernels::SampleParams* device_draws = nullptr;
  if (!graphed) {
    const DeviceBatch device = draft_inputs_.upload(backend_, batch, kv_shape_.block_size, extras);
    backend_.copy_to_device(draft_logit_rows_.data(), batch.logit_rows.data(),
                            batch.logit_rows.size() * sizeof(int32_t));
    enqueue_draft(device, num_logit_rows, /*all_rows=*/false);
    device_draws = device.draws;
  } else {
    device_draws = draft_graphs_->run(backend_, batch, kv_shape_.block_size, extras, [&](const DeviceBatch& device) {
      enqueue_draft(device, rows, /*all_rows=*/true);
    });
  }
  wait_for_exchanges();
  // The draws run after the call (a replayed graph included), as a decode step's do.
  backend_.sample_rows(logits_.as<float>(), config_.vocab_size, device_draws, num_logit_rows,
                       draft_tokens_.as<int32_t>());

  // The logit rows' results (in a graph every row's, of which the first n are the batch's), in
  // one wait.
  const int64_t wanted = graphed ? n : num_logit_rows;
  const bool confidences = outputs.confidence != nullptr && mtp.confidence_head;
  std::vector<HostCopy> copies;
  if (outputs.logits != nullptr) {
    copies.push_back({outputs.logits, logits_.data(), floats(wanted * config_.vocab_size)});
  }
  if (outputs.tokens != nullptr) {
    copies.push_back({outputs.tokens, draft_tokens_.data(), static_cast<size_t>(wanted) * sizeof(int32_t)});
  }
  if (confidences) copies.push_back({outputs.confidence, draft_confidence_.data(), floats(wanted)});
  if (!copies.empty()) backend_.copy_to_host_later(copies)->wait();
  if (!confidences) return;
  for (int64_t r = 0; r < wanted; ++r) outputs.confidence[r] = 1.0f / (1.0f + std::exp(-outputs.confidence[r]));
}

void DenseDecoder::enqueue_draft(const DeviceBatch& device, int64_t num_logit_rows, bool all_rows) {
  const MtpLayerWeights& mtp = mtp_layers_.back();
  const int64_t n = device.num_tokens;
  const int64_t hidden = config_.hidden_size;
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

  // The logit rows' outputs (every row in order: the outputs themselves), their logits and
  // confidences.
  float* rows_out = out;
  if (!all_rows) {
    rows_out = logit_hidden_.as<float>();
    backend_.embedding(kernels::WeightView{out, DType::kF32, n, hidden}, draft_logit_rows_.as<int32_t>(),
                       num_logit_rows, rows_out);
  }
  mtp.shared_head_norm.forward(backend_, rows_out, num_logit_rows, normed);
  backend_.matmul(normed, mtp.shared_head, kernels::WeightView{}, num_logit_rows, logits_.as<float>());
  if (mtp.confidence_head) mtp.confidence_head->forward(backend_, rows_out, num_logit_rows, draft_confidence_.as<float>());
}

}  // namespace deepinfer
