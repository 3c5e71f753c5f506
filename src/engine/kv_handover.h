// The PROMPT -> COMPLETION handover of a prefilled request's KV (PrefilledRequest): the layers
// without a sliding window for every prompt block, by block_table; the sliding-window layers
// only for the blocks the next token's window reaches, by their own table when the cache is
// split (docs/kvstore.md, "Disaggregated engines"). Engine-thread helpers of EngineCore.
#pragma once

#include <cstdint>

#include "core/result.h"
#include "engine/engine_core.h"
#include "kvcache/kv_cache_manager.h"
#include "model/model.h"

namespace deepinfer {

// The first token (a block boundary) of the sliding-window layers' KV that the token after
// num_tokens computed ones attends to: the blocks before it are those commit_computed releases.
// 0 for a model without sliding windows.
int32_t swa_window_start(const ModelConfig& config, int32_t num_tokens, int32_t block_size);
// The same for a model whose widest sliding window is max_window tokens (0: none).
int32_t swa_window_start(int32_t max_window, int32_t num_tokens, int32_t block_size);
// The widest sliding window of the model's layers (0: none).
int32_t max_sliding_window(const ModelConfig& config);

// Fills p.kv, p.swa_first_block and p.swa_kv from the cache blocks of seq_id, whose first
// num_tokens tokens are computed.
void read_prefilled_kv(const CausalLM& model, const KvCacheManager& kv, int64_t seq_id, int32_t num_tokens,
                       PrefilledRequest& p);

// Whether p's KV fits this model and engine (sizes, block size, the sliding window's start).
Result<void> check_prefilled_kv(const CausalLM& model, const PrefilledRequest& p, int32_t block_size);

// Writes p's KV into the blocks of seq_id (allocated by KvCacheManager::allocate_imported with
// swa_start = swa_window_start) from token num_cached_tokens on; the blocks before it are the
// engine's own prefix-cache hits.
void write_prefilled_kv(CausalLM& model, const KvCacheManager& kv, int64_t seq_id, const PrefilledRequest& p,
                        int32_t num_cached_tokens);

}  // namespace deepinfer
