// Copying a prefill step's KV out layer by layer for PROMPT requests that stream it.
#include "engine/prefill_kv_export.h"

#include <algorithm>

#include "core/check.h"

namespace deepinfer {

PrefillKvExport::PrefillKvExport(const CausalLM& model, std::vector<Sequence> sequences)
    : model_(model), layers_(model.handover_layers()), sequences_(std::move(sequences)) {
  DI_CHECK(!layers_.empty(), "the model cannot hand its KV over layer by layer");
}

void PrefillKvExport::after_layer(int32_t layer) {
  finish();
  DI_CHECK(layer >= 0 && static_cast<size_t>(layer) < layers_.size(), "layer " << layer << " out of range");
  const CausalLM::HandoverLayer& kind = layers_[static_cast<size_t>(layer)];
  if (kind.bytes_per_block == 0) return;
  for (const Sequence& s : sequences_) {
    const bool sliding = kind.layers == KvLayers::kSliding;
    const int32_t first = sliding ? std::max(s.first_block, s.swa_first_block) : s.first_block;
    if (first >= s.end_block) continue;
    const std::vector<int32_t>& ids = sliding ? s.swa_ids : s.full_ids;
    DI_CHECK(static_cast<int32_t>(ids.size()) == s.end_block - first, "the export's block ids do not match its range");
    Pending p{s.sink.get(), PrefillKvPiece{kind.layers, kind.index, first, s.end_block - first, {}}, nullptr};
    p.piece.bytes.resize(ids.size() * static_cast<size_t>(kind.bytes_per_block));
    p.copies = model_.read_handover_layer_blocks_later(layer, ids, p.piece.bytes.data());
    pending_.push_back(std::move(p));
  }
}

void PrefillKvExport::finish() {
  for (Pending& p : pending_) {
    p.copies->wait();
    p.sink->put(std::move(p.piece));
  }
  pending_.clear();
}

}  // namespace deepinfer
