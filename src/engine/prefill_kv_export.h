// A PROMPT engine's prompt KV leaving while the prefill runs (PrefillHandover::kStream): after
// each decoder layer of a prefill step, that layer's KV of the blocks the step completes is copied
// out (ForwardBatch::after_layer, CausalLM::read_handover_layer_blocks_later) and handed to the
// request's sink, which sends it on (a cluster's prefill worker pushes it to the decode worker,
// server/kv_transport.h). So by the time the first token is drawn, all but the last layer's pages
// can already be on their way. The bytes are those of the handover (engine/kv_handover.h): the
// cache's own element type, the sliding-window layers only from the window's first block on.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "model/model.h"

namespace deepinfer {

// One layer's KV of consecutive prompt blocks.
struct PrefillKvPiece {
  KvLayers layers = KvLayers::kFull;
  int32_t layer = 0;        // its index among the handover's layers of that kind (CausalLM::HandoverLayer)
  int32_t first_block = 0;  // the prompt's block index
  int32_t num_blocks = 0;
  std::vector<uint8_t> bytes;  // [num_blocks, the layer's bytes per block]
};

// Where a streamed request's pieces go. put() runs on the engine's thread or its runner's, once
// the piece's bytes are in place; every block of every layer comes once, before the request's
// prefilled output (its first token). A request that ends otherwise (aborted, failed) just stops
// sending.
class PrefillKvSink {
 public:
  virtual ~PrefillKvSink() = default;
  virtual void put(PrefillKvPiece piece) = 0;
};

// The copies of one step: built before its launch, after_layer from the forward, finish after the
// step was collected. A layer's copies are handed over one layer later (or at finish), so the host
// waits for a device layer's copies only while the next layer runs.
class PrefillKvExport {
 public:
  struct Sequence {
    std::shared_ptr<PrefillKvSink> sink;
    int32_t first_block = 0;  // the prompt blocks [first_block, end_block) this step completes
    int32_t end_block = 0;
    std::vector<int32_t> full_ids;  // their ids in the full layers' table
    int32_t swa_first_block = 0;    // the sliding layers send [max(first_block, this), end_block)
    std::vector<int32_t> swa_ids;   // those blocks' ids in the sliding layers' table
  };
  PrefillKvExport(const CausalLM& model, std::vector<Sequence> sequences);
  void after_layer(int32_t layer);
  // Hands over what after_layer left pending (waits for its copies).
  void finish();

 private:
  struct Pending {
    PrefillKvSink* sink;
    PrefillKvPiece piece;
    std::unique_ptr<PendingCopies> copies;
  };

  const CausalLM& model_;
  std::vector<CausalLM::HandoverLayer> layers_;
  std::vector<Sequence> sequences_;
  std::vector<Pending> pending_;
};

}  // namespace deepinfer
