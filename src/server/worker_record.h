// One cluster worker as it announces itself in the registry (worker_registry.h): where its
// token-level API listens, what it serves, and its load at the last heartbeat. Serialised as one
// JSON object, the value of its Redis key.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

#include "core/result.h"

namespace deepinfer::server {

struct WorkerLoadReport {
  int64_t queued_tokens = 0;   // admitted, not started: n x (prompt + max_tokens) each
  int64_t num_waiting = 0;     // requests in the engine's queue
  int64_t num_running = 0;     // requests in its batch
  double kv_usage = 0.0;       // fraction of the KV pool in use
  int64_t kv_tokens_used = 0;  // kv_usage in tokens
  int64_t kv_tokens_free = 0;  // what the pool can still take
  int64_t cached_tokens = 0;   // prompt tokens served from its prefix cache so far
};

struct WorkerRecord {
  std::string id;  // "host:port", unique in a cluster
  std::string host;
  uint16_t port = 0;
  // "both" (whole requests), "prefill" / "decode" (disaggregated: docs/cluster.md), or "encoder"
  // (an image encoder service: encode_api.h; its load is its queue of images, in tokens).
  std::string role = "both";
  uint16_t kv_port = 0;       // a decode worker's KV receiver (kv_transport.h); 0: none
  std::string model;          // the served model name; a router routes only to its own model's
  int32_t block_size = 0;     // tokens per KV page
  int32_t max_model_len = 0;  // context length: prompt + output tokens one request may hold
  // One rank of a multi-engine worker (serve --data-parallel-size N with --role prefill|decode):
  // each rank registers on its own; dp_group names the group (its rank 0's address), dp_rank is
  // the rank. Empty for a single engine, and for a role "both" group, which registers its front.
  std::string dp_group;
  int32_t dp_rank = 0;
  // The body its token-level API takes (serve --max-internal-body-bytes); 0: not said.
  int64_t max_body_bytes = 0;
  int64_t heartbeat = 0;  // counts up with every heartbeat: a newer one proves the worker alive
  WorkerLoadReport load;
};

nlohmann::json worker_record_to_json(const WorkerRecord& record);
// A missing field or a wrong type is an error naming it.
Result<WorkerRecord> worker_record_from_json(const nlohmann::json& json);

}  // namespace deepinfer::server
