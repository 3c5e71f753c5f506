// A forward step's integer inputs (ForwardBatch's token ids, positions, slots, lengths and tables)
// packed into one host array, uploaded with one copy into one device buffer that persists across
// steps, and the DeviceBatch viewing it. Decode graphs pad a batch to their fixed shape here. A
// decode step whose sequences are named (ForwardBatch::seq_ids) keeps its block table on the
// device: rows of sequences the step before had are moved there, and only the rows that changed
// (a new sequence, a page appended) are sent.
#pragma once

#include <cstdint>
#include <vector>

#include "model/layers/attention.h"

namespace deepinfer {

// The fixed shape a decode graph was captured for: num_seqs sequences of one token each and block
// tables width blocks wide. Rows past the batch's sequences are dummies: token 0 at position 0
// that sees one key (block 0, only read) and writes no cache slot (slot -1).
struct PaddedShape {
  int32_t num_seqs = 0;
  int32_t width = 0;
};

// What a step uploads besides its ForwardBatch.
struct StepExtras {
  const PaddedShape* shape = nullptr;  // pad to this decode graph's shape
  // The backend's memory holding the draws of the step before, for batch.token_from_draw.
  const int32_t* previous_draws = nullptr;
  // The step's draws (CausalLM::launch_sampled), packed into the same copy; their device copy is
  // DeviceBatch::draws.
  const std::vector<kernels::SampleParams>* draws = nullptr;
  // The step runs from a captured graph: it names previous_draws even when it takes none, so a
  // later replay takes whatever its step asks for.
  bool replayed = false;
  // The width of ForwardBatch::embedding_rows' rows (the model's hidden size).
  int64_t hidden_size = 0;
};

class StepInputs {
 public:
  // Packs batch (padded to *extras.shape when given; the batch must then be a decode batch that
  // fits) and the draws, and enqueues their upload. What the step computes on the device before
  // its forward (tokens taken from extras.previous_draws where batch.token_from_draw says so, the
  // kept block table's rows) is left to finish_inputs, so a graph can replay it. The returned
  // DeviceBatch views this object's buffers: valid until the next upload. With a shape and the
  // sequences' ids (no split sliding-window tables) the block table is kept between steps. The
  // buffers move only when a step needs more room than any before (a padded shape keeps room for
  // a draw and a sent table row per row), and then device_data() or table_data() says where they
  // went. Not thread-safe.
  DeviceBatch upload(Backend& backend, const ForwardBatch& batch, int32_t block_size, const StepExtras& extras = {});
  const void* device_data() const { return device_.data(); }
  const void* table_data() const { return table_.data(); }
  // Block-table rows the last upload sent; the others were moved on the device.
  int32_t rows_sent() const { return rows_sent_; }

 private:
  // (Re)allocates the kept table, empty, unless it has num_seqs rows of width entries.
  void keep_table(Backend& backend, int32_t num_seqs, int32_t width);
  // Appends the kept table's step inputs to host_ (per row its source row, then the rows sent)
  // and returns the source's offset in host_.
  size_t append_kept_table(const ForwardBatch& batch, int32_t num_seqs, int32_t width, size_t scratch_ints);

  std::vector<int32_t> host_;
  DeviceBuffer device_;
  // The block table kept on the device: table_rows_ rows of table_width_ entries, of which the
  // first kept_seq_ids_.size() hold kept_rows_ (the last kept step's sequences, in its order).
  DeviceBuffer table_;
  int32_t table_rows_ = 0;
  int32_t table_width_ = 0;
  std::vector<int64_t> kept_seq_ids_;
  std::vector<int32_t> kept_rows_;
  int32_t rows_sent_ = 0;
};

// Enqueues what the step computes on the device before its forward (DeviceBatch's take_from and
// rebuild): its input tokens taken from the draws of the step before, token_ids[t] =
// take_from[draw_of_token[t]] where draw_of_token[t] >= 0; the kept block table's rows.
void finish_inputs(Backend& backend, const DeviceBatch& batch);

}  // namespace deepinfer
