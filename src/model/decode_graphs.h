// Decode steps replayed from captured graphs (CUDA graphs on the CUDA backend): one graph per
// (batch bucket, block-table width bucket, split cache or not). The first step of a shape runs
// eagerly (lazy set-up, and this step's result) and is then captured; later steps of that shape
// upload their inputs into the graph's own buffer and replay it. A graph bakes in every device
// pointer the step touches (weights, KV cache, activations, its inputs), so the owner clears the
// graphs when any of those moves.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <tuple>

#include "model/step_inputs.h"

namespace deepinfer {

class DecodeGraphs {
 public:
  static constexpr int32_t kMaxBatch = 256;
  // Block tables are padded to a power of two of at least this many blocks.
  static constexpr int32_t kMinWidth = 8;

  // Whether a step can run from a graph: every sequence adds one token, the logits of every row
  // are wanted in row order, at most kMaxBatch sequences, and no sliding-window replay lengths.
  static bool can_run(const ForwardBatch& batch);
  // The shape batch runs in: sequences rounded up to 1, 2, 4, ..., 256; the table width up to a
  // power of two. The attention's split count follows from the padded width, never from lengths.
  static PaddedShape shape_for(const ForwardBatch& batch);

  // Runs one step (can_run(batch) must hold) and returns the device copy of its draws
  // (DeviceBatch::draws); extras as StepInputs::upload takes them (the shape is the graphs').
  // enqueue_step(device_batch) enqueues the whole forward for the padded batch, leaving the
  // logits of every row in device memory; it must do the same thing on every call and nothing
  // that allocates, reads back or waits. The graph runs the step's finish_inputs first (drawn
  // input tokens, the kept block table). A graph whose input buffers or previous draws moved is
  // captured again.
  // Not thread-safe.
  const kernels::SampleParams* run(Backend& backend, const ForwardBatch& batch, int32_t block_size, StepExtras extras,
                                  const std::function<void(const DeviceBatch&)>& enqueue_step);
  // Drops every graph (they are captured again when next needed).
  void clear() { graphs_.clear(); }
  // Steps replayed from a graph so far (a captured step runs eagerly the first time).
  int64_t num_replays() const { return num_replays_; }

 private:
  struct Graph {
    StepInputs inputs;  // the graph's fixed input buffers
    // What the graph read when captured: inputs' buffers, the previous draws.
    std::tuple<const void*, const void*, const int32_t*> captured_over;
    std::unique_ptr<CapturedGraph> graph;
  };
  // (padded sequences, padded width, split cache tables, rows sharing sequences: their attention
  // is launched differently)
  std::map<std::tuple<int32_t, int32_t, bool, bool>, Graph> graphs_;
  int64_t num_replays_ = 0;
};

}  // namespace deepinfer
