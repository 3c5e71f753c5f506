// What a load balancer sees: the request to place, and a snapshot of each instance's load. The
// router fills both from what workers report (or the simulator from its model of them).
#pragma once

#include <cstdint>
#include <span>

namespace deepinfer {

// The prompt's KV is addressed in blocks of this many tokens (the Mooncake traces' block size).
constexpr int64_t kRoutingBlockTokens = 512;

struct RoutingRequest {
  double now_ms = 0;                   // the router's clock (non-decreasing from call to call)
  int64_t input_tokens = 0;            // the prompt, tokenised and rendered once at the entry
  int64_t output_tokens_estimate = 0;  // 0: unknown
  // The prompt's prefix block hash chain: entry k names block k together with everything before
  // it, so two prompts share as many leading blocks as their chains agree on. Not owned.
  std::span<const uint64_t> block_hashes;
  int64_t shared_cached_tokens = 0;  // leading tokens the shared KV store holds (0 without a store)
  bool is_retry = false;             // asked again after the policy held it (its demand is counted)
};

// One instance (one DP process: one GPU) as the router last heard of it.
struct InstanceLoad {
  int64_t queued_prefill_tokens = 0;  // prompt tokens given to it and not yet computed
  double queued_prefill_ms = 0;       // the cost model's estimate of computing them
  int32_t num_running_requests = 0;   // decode: requests in its batch or waiting for a slot
  int64_t kv_tokens_used = 0;         // tokens of KV its running requests hold now
  int64_t kv_tokens_free = 0;         // tokens of KV it can still promise to new requests
  // Leading tokens of *this* request that its own prefix cache holds. Filled only for policies
  // whose reads_cached_prefix() is true (the lookup costs one probe per block per instance).
  int64_t cached_prefix_tokens = 0;
  // The DP group it runs in (one multi-engine worker: its ranks step together and share a node),
  // numbered by the router; a group's instances come consecutively. -1: not known, and the policy
  // groups such instances by its own group size (the simulator's instances).
  int64_t dp_group = -1;
};

}  // namespace deepinfer
