// Request: one sequence the scheduler tracks, from arrival to finish. A user request with n > 1
// becomes n of these (sample_index 0..n-1) sharing the prompt's KV blocks.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "deepinfer/sampling_params.h"
#include "kvstore/page_format.h"

namespace deepinfer {

enum class RequestStatus : uint8_t { kWaiting, kRunning, kFinished };

enum class FinishReason : uint8_t {
  kNone,
  kStop,    // an eos / stop token id or a stop string
  kLength,  // max_tokens or the model's context length
  kAbort,   // cancelled by the caller
  kPrefilled,  // PROMPT mode: prefill done, handed on as a PrefilledRequest
};

struct Request {
  int64_t seq_id = 0;      // unique per sequence (the KV cache's key)
  int64_t request_id = 0;  // the caller's id; shared by the n samples of one request
  int32_t sample_index = 0;
  std::vector<int32_t> prompt_token_ids;
  std::vector<int32_t> output_token_ids;
  SamplingParams params;
  uint64_t seed = 0;        // params.seed, or derived from the request id
  int32_t priority = 0;     // lower runs first under the priority policy
  int64_t arrival = 0;      // arrival order
  std::string cache_salt;   // tenant isolation of the prefix cache (set by the server only)
  TrafficClass kv_cache_class = TrafficClass::kDefault;  // TTL of its pages in the persistent store

  RequestStatus status = RequestStatus::kWaiting;
  // Its structured-output grammar is still compiling: the scheduler runs its prompt but not the
  // last token, whose logits are sampled through the grammar's mask.
  bool awaiting_grammar = false;
  FinishReason finish_reason = FinishReason::kNone;
  int32_t num_computed_tokens = 0;  // tokens whose KV is in the cache
  int32_t num_cached_tokens = 0;    // prompt tokens found in the prefix cache at admission
  int32_t num_preemptions = 0;

  int32_t num_prompt_tokens() const { return static_cast<int32_t>(prompt_token_ids.size()); }
  int32_t num_tokens() const { return num_prompt_tokens() + static_cast<int32_t>(output_token_ids.size()); }
  // The token at absolute position i (prompt, then outputs).
  int32_t token_at(int32_t i) const {
    return i < num_prompt_tokens() ? prompt_token_ids[static_cast<size_t>(i)]
                                   : output_token_ids[static_cast<size_t>(i - num_prompt_tokens())];
  }
  std::vector<int32_t> all_tokens() const {
    std::vector<int32_t> tokens = prompt_token_ids;
    tokens.insert(tokens.end(), output_token_ids.begin(), output_token_ids.end());
    return tokens;
  }
  bool is_finished() const { return status == RequestStatus::kFinished; }
};

}  // namespace deepinfer
