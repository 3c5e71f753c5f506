// Single-sequence chunked prefill and decode.
#include "engine/generator.h"

#include <algorithm>
#include <string>

#include "core/check.h"

namespace deepinfer {
namespace {

int64_t resolve_max_tokens(const CausalLM& model, int64_t requested) {
  const int64_t model_max = model.config().max_position_embeddings;
  if (requested > 0) return requested;
  return model_max > 0 ? model_max : 4096;
}

// One sequence, no prefix caching: the pool holds exactly the longest sequence. A model mixing
// sliding-window and full-attention layers keeps the sliding layers' pages apart (unless
// bound_sliding_kv is off): they need the window plus one chunk, whatever the sequence length.
KvCacheConfig generator_kv_config(const CausalLM& model, int64_t max_seq_tokens, int32_t block_size,
                                  int32_t prefill_chunk_tokens, bool bound_sliding_kv) {
  KvCacheConfig config;
  config.num_blocks = blocks_for_tokens(max_seq_tokens, block_size);
  config.block_size = block_size;
  config.enable_prefix_caching = false;
  const auto& windows = model.config().layer_sliding_window;
  if (bound_sliding_kv && model.swa_kv_bytes_per_token() > 0) {
    config.sliding_window = *std::max_element(windows.begin(), windows.end());
    config.num_swa_blocks = blocks_for_tokens(config.sliding_window, block_size) +
                            blocks_for_tokens(prefill_chunk_tokens, block_size) + 2;
  }
  return config;
}

constexpr int64_t kSeqId = 0;

}  // namespace

Generator::Generator(CausalLM& model, int32_t block_size, int64_t max_seq_tokens, int32_t prefill_chunk_tokens,
                     bool bound_sliding_kv)
    : model_(model),
      block_size_(block_size),
      max_seq_tokens_(resolve_max_tokens(model, max_seq_tokens)),
      prefill_chunk_tokens_(prefill_chunk_tokens),
      kv_cache_(generator_kv_config(model, max_seq_tokens_, block_size, prefill_chunk_tokens, bound_sliding_kv)) {
  DI_CHECK(block_size > 0 && prefill_chunk_tokens > 0);
  model_.allocate_kv_cache(KvCacheShape{kv_cache_.num_blocks(), block_size_, kv_cache_.num_swa_blocks()});
}

void Generator::reset() {
  kv_cache_.free(kSeqId);
  tokens_.clear();
}

ForwardBatch Generator::make_batch(const std::vector<int32_t>& tokens, size_t begin, size_t end, bool all_logits) {
  const std::vector<int32_t>& block_ids = kv_cache_.block_table(kSeqId);
  const std::vector<int32_t>& swa_ids = kv_cache_.swa_block_table(kSeqId);
  ForwardBatch batch;
  const auto first_position = static_cast<int32_t>(tokens_.size());
  for (size_t i = begin; i < end; ++i) {
    const auto position = static_cast<int32_t>(first_position + (i - begin));
    batch.token_ids.push_back(tokens[i]);
    batch.positions.push_back(position);
    const int32_t block = block_ids[static_cast<size_t>(position / block_size_)];
    batch.slot_mapping.push_back(block * block_size_ + position % block_size_);
    if (!swa_ids.empty()) {
      const int32_t swa_block = swa_ids[static_cast<size_t>(position / block_size_)];
      batch.swa_slot_mapping.push_back(swa_block * block_size_ + position % block_size_);
    }
  }
  const auto num_new = static_cast<int32_t>(end - begin);
  batch.query_start = {0, num_new};
  batch.seq_len = {first_position + num_new};
  batch.max_blocks_per_seq = static_cast<int32_t>(block_ids.size());
  batch.block_table = block_ids;
  // Released sliding-window entries (-1) point at block 0; the kernels never read them.
  for (int32_t block : swa_ids) batch.swa_block_table.push_back(std::max(block, 0));
  if (all_logits) {
    for (int32_t r = 0; r < num_new; ++r) batch.logit_rows.push_back(r);
  } else {
    batch.logit_rows = {num_new - 1};
  }
  return batch;
}

Result<std::vector<float>> Generator::append(const std::vector<int32_t>& tokens, bool all_logits) {
  const int64_t vocab = model_.config().vocab_size;
  for (size_t i = 0; i < tokens.size(); ++i) {
    if (tokens[i] < 0 || tokens[i] >= vocab) {
      return Error{"token id " + std::to_string(tokens[i]) + " at index " + std::to_string(i) +
                   " is outside the vocabulary [0, " + std::to_string(vocab) + ")"};
    }
  }
  const int64_t total = num_tokens() + static_cast<int64_t>(tokens.size());
  if (total > max_seq_tokens_) {
    return Error{"the sequence would have " + std::to_string(total) + " tokens; at most " +
                 std::to_string(max_seq_tokens_) + " fit (the model's context length)"};
  }
  if (tokens.empty()) return std::vector<float>{};
  std::vector<float> logits;
  for (size_t begin = 0; begin < tokens.size(); begin += static_cast<size_t>(prefill_chunk_tokens_)) {
    const size_t end = std::min(tokens.size(), begin + static_cast<size_t>(prefill_chunk_tokens_));
    const bool last_chunk = end == tokens.size();
    // Blocks one chunk at a time: a split cache's sliding-window pool holds only a window and a chunk.
    int32_t num_cached_tokens = 0;
    const auto covered = static_cast<int32_t>(num_tokens() + static_cast<int64_t>(end - begin));
    const bool allocated = kv_cache_.allocate(kSeqId, tokens_, covered, "", &num_cached_tokens);
    DI_CHECK(allocated, "the pools are sized for max_seq_tokens and one chunk past the window");
    if (!all_logits && !last_chunk) {
      ForwardBatch batch = make_batch(tokens, begin, end, false);
      batch.logit_rows.clear();
      model_.forward(batch, nullptr);
    } else {
      const ForwardBatch batch = make_batch(tokens, begin, end, all_logits);
      const size_t offset = logits.size();
      logits.resize(offset + batch.logit_rows.size() * static_cast<size_t>(vocab));
      model_.forward(batch, logits.data() + offset);
    }
    tokens_.insert(tokens_.end(), tokens.begin() + static_cast<std::ptrdiff_t>(begin),
                   tokens.begin() + static_cast<std::ptrdiff_t>(end));
    kv_cache_.commit_computed(kSeqId, tokens_, static_cast<int32_t>(num_tokens()));
  }
  return logits;
}

Result<std::vector<int32_t>> Generator::generate(const std::vector<int32_t>& prompt, const GenerateOptions& options,
                                                 const std::function<void(int32_t)>& on_token) {
  DI_TRY(options.sampling.validate(model_.config().vocab_size));
  if (prompt.empty()) return Error{"the prompt is empty; give at least one token"};
  if (options.max_tokens < 0) return Error{"max_tokens must be >= 0"};
  reset();
  std::vector<int32_t> stop_ids = options.stop_token_ids;
  if (!options.ignore_eos) {
    for (int64_t id : model_.config().eos_token_ids) stop_ids.push_back(static_cast<int32_t>(id));
  }
  auto logits = append(prompt, false);
  if (!logits.ok()) return logits.error();
  const int64_t vocab = model_.config().vocab_size;
  std::vector<int32_t> generated;
  while (static_cast<int32_t>(generated.size()) < options.max_tokens) {
    const int32_t token =
        sample_token(logits->data(), vocab, options.sampling, options.sampling.seed.value_or(0), num_tokens(), 0);
    generated.push_back(token);
    if (on_token) on_token(token);
    if (std::find(stop_ids.begin(), stop_ids.end(), token) != stop_ids.end()) break;
    if (static_cast<int32_t>(generated.size()) == options.max_tokens) break;
    logits = append({token}, false);
    if (!logits.ok()) return logits.error();
  }
  return generated;
}

}  // namespace deepinfer
