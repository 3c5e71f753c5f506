// SWA bounded replay (docs/kvstore.md): on a persistent-store hit of a sliding-window model the
// store gives back only the full-attention layers' KV; the sliding-window layers' KV of the last
// R prefix tokens is rebuilt by running those tokens through the model again.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "model/model.h"

namespace deepinfer {

// KvStoreConfig::swa_replay_tokens values with a meaning of their own.
inline constexpr int32_t kSwaReplayDefault = 0;  // max(128, window)
inline constexpr int32_t kSwaReplayExact = -1;   // number of sliding-window layers x window

// R for the model: the setting, raised to the largest window (a shorter replay leaves keys the
// next token attends to unwritten) and rounded up to whole pages (replays start on a page).
int32_t swa_replay_tokens(const ModelConfig& config, int32_t setting, int32_t block_size);

// Runs tokens [first, end) of a sequence whose KV up to first is in the cache. The
// full-attention layers read table's pages (already holding [0, end)) and are not written; the
// sliding-window layers write swa_table's pages and see only keys from its first non-empty
// (>= 0) entry on. logits: scratch for the one row the model must return.
void run_swa_replay(CausalLM& model, std::span<const int32_t> tokens, int32_t first, int32_t end,
                    const std::vector<int32_t>& table, const std::vector<int32_t>& swa_table, int32_t block_size,
                    std::vector<float>& logits);

}  // namespace deepinfer
