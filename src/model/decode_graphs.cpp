// DecodeGraphs: bucketing, capture on first use, replay.
#include "model/decode_graphs.h"

#include <algorithm>
#include <bit>
#include <exception>

namespace deepinfer {

bool DecodeGraphs::can_run(const ForwardBatch& batch) {
  const int32_t num_seqs = batch.num_seqs();
  if (num_seqs == 0 || num_seqs > kMaxBatch || batch.num_tokens() != num_seqs || !batch.swa_seq_len.empty() ||
      !batch.embedding_rows.empty() || !batch.images_to_encode.empty() || !batch.lookahead.empty() ||
      !batch.mrope_positions.empty()) {
    return false;
  }
  if (batch.logit_rows.size() != static_cast<size_t>(num_seqs)) return false;
  for (int32_t s = 0; s < num_seqs; ++s) {
    const auto index = static_cast<size_t>(s);
    if (batch.logit_rows[index] != s || batch.query_start[index] != s) return false;
  }
  return true;
}

PaddedShape DecodeGraphs::shape_for(const ForwardBatch& batch) {
  PaddedShape shape;
  shape.num_seqs = static_cast<int32_t>(std::bit_ceil(static_cast<uint32_t>(batch.num_seqs())));
  shape.width = static_cast<int32_t>(std::bit_ceil(static_cast<uint32_t>(std::max(batch.max_blocks_per_seq, kMinWidth))));
  return shape;
}

const kernels::SampleParams* DecodeGraphs::run(Backend& backend, const ForwardBatch& batch, int32_t block_size,
                                               StepExtras extras,
                                               const std::function<void(const DeviceBatch&)>& enqueue_step) {
  const PaddedShape shape = shape_for(batch);
  Graph& entry = graphs_[{shape.num_seqs, shape.width, !batch.swa_block_table.empty(), batch.rows_share_sequences}];
  extras.shape = &shape;
  extras.replayed = true;
  const DeviceBatch device = entry.inputs.upload(backend, batch, block_size, extras);
  const auto reads = std::make_tuple(entry.inputs.device_data(), entry.inputs.table_data(), device.take_from);
  if (reads != entry.captured_over) entry.graph.reset();
  if (entry.graph != nullptr) {
    backend.replay(*entry.graph);
    ++num_replays_;
    return device.draws;
  }
  const auto whole_step = [&] {
    finish_inputs(backend, device);
    enqueue_step(device);
  };
  // This step's result, and every lazy set-up (GEMM plans, kernel attributes, cached workspaces)
  // outside the capture.
  whole_step();
  entry.captured_over = reads;
  backend.begin_capture();
  try {
    whole_step();
  } catch (...) {
    // End the broken capture so the stream takes work again; the first error is the one reported.
    try {
      (void)backend.end_capture();
    } catch (const std::exception&) {
    }
    throw;
  }
  entry.graph = backend.end_capture();
  return device.draws;
}

}  // namespace deepinfer
