// Reading a prefilled request's KV out of a PROMPT engine's cache and writing it into a
// COMPLETION engine's.
#include "engine/kv_handover.h"

#include <algorithm>
#include <string>

#include "core/check.h"

namespace deepinfer {

int32_t max_sliding_window(const ModelConfig& config) {
  const auto& windows = config.layer_sliding_window;
  return windows.empty() ? 0 : std::max(0, *std::max_element(windows.begin(), windows.end()));
}

int32_t swa_window_start(int32_t max_window, int32_t num_tokens, int32_t block_size) {
  if (max_window <= 0) return 0;
  return std::max(0, num_tokens - max_window) / block_size * block_size;
}

int32_t swa_window_start(const ModelConfig& config, int32_t num_tokens, int32_t block_size) {
  return swa_window_start(max_sliding_window(config), num_tokens, block_size);
}

void read_prefilled_kv(const CausalLM& model, const KvCacheManager& kv, int64_t seq_id, int32_t num_tokens,
                       PrefilledRequest& p) {
  const int32_t block_size = kv.block_size();
  const int32_t num_blocks = blocks_for_tokens(num_tokens, block_size);
  const std::vector<int32_t>& table = kv.block_table(seq_id);
  const std::vector<int32_t>& swa_table = kv.has_swa_tables() ? kv.swa_block_table(seq_id) : table;
  DI_CHECK(static_cast<int32_t>(table.size()) >= num_blocks);
  const auto full_bytes = static_cast<size_t>(model.handover_kv_bytes_per_block(KvLayers::kFull));
  p.kv.resize(static_cast<size_t>(num_blocks) * full_bytes);
  model.read_handover_kv_blocks(KvLayers::kFull, {table.begin(), table.begin() + num_blocks}, p.kv.data());
  // The blocks before the window were released (-1) or are no longer read by any later token.
  p.swa_first_block = swa_window_start(model.config(), num_tokens, block_size) / block_size;
  p.swa_kv.resize(static_cast<size_t>(num_blocks - p.swa_first_block) *
                  static_cast<size_t>(model.handover_kv_bytes_per_block(KvLayers::kSliding)));
  model.read_handover_kv_blocks(KvLayers::kSliding,
                                {swa_table.begin() + p.swa_first_block, swa_table.begin() + num_blocks},
                                p.swa_kv.data());
}

Result<void> check_prefilled_kv(const CausalLM& model, const PrefilledRequest& p, int32_t block_size) {
  if (p.block_size != block_size) {
    return Error{"prefilled KV uses " + std::to_string(p.block_size) + "-token blocks; this engine uses " +
                 std::to_string(block_size)};
  }
  if (p.prompt_token_ids.empty()) return Error{"the prefilled request has an empty prompt"};
  const auto num_tokens = static_cast<int32_t>(p.prompt_token_ids.size());
  const int32_t num_blocks = blocks_for_tokens(num_tokens, block_size);
  const int32_t needed_from = swa_window_start(model.config(), num_tokens, block_size) / block_size;
  if (p.swa_first_block < 0 || p.swa_first_block > needed_from) {
    return Error{"the prefilled sliding-window KV starts at block " + std::to_string(p.swa_first_block) +
                 "; this engine needs it from block " + std::to_string(needed_from)};
  }
  const auto full_bytes = static_cast<size_t>(model.handover_kv_bytes_per_block(KvLayers::kFull));
  const auto swa_bytes = static_cast<size_t>(model.handover_kv_bytes_per_block(KvLayers::kSliding));
  if (p.kv.size() != static_cast<size_t>(num_blocks) * full_bytes ||
      p.swa_kv.size() != static_cast<size_t>(num_blocks - p.swa_first_block) * swa_bytes) {
    return Error{"prefilled KV has the wrong size for this model"};
  }
  return {};
}

void write_prefilled_kv(CausalLM& model, const KvCacheManager& kv, int64_t seq_id, const PrefilledRequest& p,
                        int32_t num_cached_tokens) {
  const int32_t block_size = kv.block_size();
  const int32_t num_blocks = blocks_for_tokens(static_cast<int64_t>(p.prompt_token_ids.size()), block_size);
  const int32_t first_new = num_cached_tokens / block_size;
  const std::vector<int32_t>& table = kv.block_table(seq_id);
  const auto full_bytes = static_cast<size_t>(model.handover_kv_bytes_per_block(KvLayers::kFull));
  model.write_handover_kv_blocks(KvLayers::kFull, {table.begin() + first_new, table.begin() + num_blocks},
                                 p.kv.data() + static_cast<size_t>(first_new) * full_bytes);
  const auto swa_bytes = static_cast<size_t>(model.handover_kv_bytes_per_block(KvLayers::kSliding));
  if (swa_bytes == 0) return;
  // Unsplit, the sliding layers' blocks before the window would be registered unwritten.
  DI_CHECK(kv.has_swa_tables(), "a COMPLETION engine splits a sliding-window model's cache");
  const std::vector<int32_t>& swa_table = kv.swa_block_table(seq_id);
  // Entries before the engine's own window start are empty (allocate_imported's swa_start).
  int32_t from = std::max(first_new, p.swa_first_block);
  while (from < num_blocks && swa_table[static_cast<size_t>(from)] < 0) ++from;
  model.write_handover_kv_blocks(KvLayers::kSliding, {swa_table.begin() + from, swa_table.begin() + num_blocks},
                                 p.swa_kv.data() + static_cast<size_t>(from - p.swa_first_block) * swa_bytes);
}

}  // namespace deepinfer
