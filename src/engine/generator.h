// Generator: runs one sequence through a model — chunked prefill, then decode steps — over a
// paged KV cache of its own. It serves the CLI (generate, score, bench) until the batching
// scheduler takes over request traffic. Not thread-safe.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "kvcache/kv_cache_manager.h"
#include "model/model.h"
#include "sampling/logprobs.h"
#include "sampling/sampler.h"

namespace deepinfer {

struct GenerateOptions {
  int32_t max_tokens = 16;
  SamplingParams sampling;
  bool ignore_eos = false;
  std::vector<int32_t> stop_token_ids;  // besides the model's eos ids unless ignore_eos
};

class Generator {
 public:
  // Allocates the model's KV cache for one sequence of up to max_seq_tokens tokens (the model's
  // max_position_embeddings when 0). bound_sliding_kv: a model mixing sliding-window and full
  // layers keeps its sliding layers' pages in a pool bounded by the window (off: every layer
  // keeps every page, as for other models).
  Generator(CausalLM& model, int32_t block_size = 128, int64_t max_seq_tokens = 0, int32_t prefill_chunk_tokens = 512,
            bool bound_sliding_kv = true);

  int64_t num_tokens() const { return static_cast<int64_t>(tokens_.size()); }
  int64_t max_seq_tokens() const { return max_seq_tokens_; }
  // Forgets the sequence (its blocks go back to the pool).
  void reset();
  const KvCacheManager& kv_cache() const { return kv_cache_; }

  // Appends tokens to the sequence and runs them (in chunks of prefill_chunk_tokens). Returns
  // logits [n, vocab]: one row per appended token when all_logits, else the last token's row.
  // Errors: a token id outside the vocabulary, or the sequence outgrowing max_seq_tokens.
  Result<std::vector<float>> append(const std::vector<int32_t>& tokens, bool all_logits);

  // Resets, runs the prompt, then samples up to max_tokens tokens; on_token sees each one as it
  // is produced. Returns the generated ids (the stop token included when one ended it).
  Result<std::vector<int32_t>> generate(const std::vector<int32_t>& prompt, const GenerateOptions& options,
                                        const std::function<void(int32_t)>& on_token = {});

 private:
  ForwardBatch make_batch(const std::vector<int32_t>& tokens, size_t begin, size_t end, bool all_logits);

  CausalLM& model_;
  int32_t block_size_;
  int64_t max_seq_tokens_;
  int32_t prefill_chunk_tokens_;
  KvCacheManager kv_cache_;
  std::vector<int32_t> tokens_;
};

}  // namespace deepinfer
