// The replay length and the replay forward pass.
#include "engine/swa_replay.h"

#include <algorithm>

#include "core/check.h"

namespace deepinfer {

int32_t swa_replay_tokens(const ModelConfig& config, int32_t setting, int32_t block_size) {
  const auto& windows = config.layer_sliding_window;
  const int64_t window = windows.empty() ? 0 : *std::max_element(windows.begin(), windows.end());
  const auto num_sliding =
      static_cast<int64_t>(std::count_if(windows.begin(), windows.end(), [](int64_t w) { return w > 0; }));
  int64_t tokens = setting == kSwaReplayExact     ? num_sliding * window
                   : setting == kSwaReplayDefault ? std::max<int64_t>(128, window)
                                                  : setting;
  tokens = std::max(tokens, window);
  tokens = (tokens + block_size - 1) / block_size * block_size;
  return static_cast<int32_t>(std::min<int64_t>(tokens, INT32_MAX / 2));
}

void run_swa_replay(CausalLM& model, std::span<const int32_t> tokens, int32_t first, int32_t end,
                    const std::vector<int32_t>& table, const std::vector<int32_t>& swa_table, int32_t block_size,
                    std::vector<float>& logits) {
  DI_CHECK(first < end && static_cast<size_t>(end) <= tokens.size() && swa_table.size() == table.size());
  const auto origin_page = static_cast<int32_t>(
      std::find_if(swa_table.begin(), swa_table.end(), [](int32_t b) { return b >= 0; }) - swa_table.begin());
  DI_CHECK(origin_page * block_size <= first, "replay from " << first << " but its sliding pages start at "
                                                             << origin_page * block_size);
  ForwardBatch batch;
  for (int32_t p = first; p < end; ++p) {
    const int32_t swa_block = swa_table[static_cast<size_t>(p / block_size)];
    DI_CHECK(swa_block >= 0, "replay position " << p << " has no sliding-window block");
    batch.token_ids.push_back(tokens[static_cast<size_t>(p)]);
    batch.positions.push_back(p);
    batch.slot_mapping.push_back(-1);  // the full layers' stored KV stays as loaded
    batch.swa_slot_mapping.push_back(swa_block * block_size + p % block_size);
  }
  batch.query_start = {0, end - first};
  batch.seq_len = {end};
  batch.max_blocks_per_seq = static_cast<int32_t>(table.size());
  for (const int32_t block : table) batch.block_table.push_back(std::max(block, 0));
  // The sliding layers' table starts at the origin page, so their keys (and the kernel's
  // positions) count from there; padding and entries outside the window point at block 0.
  for (size_t b = static_cast<size_t>(origin_page); b < swa_table.size(); ++b) {
    batch.swa_block_table.push_back(std::max(swa_table[b], 0));
  }
  batch.swa_block_table.resize(table.size(), 0);
  batch.swa_seq_len = {end - origin_page * block_size};
  batch.logit_rows = {end - first - 1};
  logits.resize(static_cast<size_t>(model.config().vocab_size));
  model.forward(batch, logits.data());
}

}  // namespace deepinfer
