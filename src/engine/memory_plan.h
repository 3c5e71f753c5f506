// How much device memory the KV cache may take. Before the cache exists, a dry run on a scratch
// cache of a few pages runs the heaviest steps the engine's limits allow: a whole prefill chunk with
// logits on every row (prompt logprobs) at the end of a max_model_len context, the same chunk split
// over as many sequences as take the tensor-core prefill path, and a decode step (device-sampled,
// captured as a graph when graphs are on) at every graph bucket up to max_num_seqs, each sequence at
// max_model_len. What those steps leave allocated (activations, logits, kept workspaces, the graphs'
// shared workspace) stays allocated, and what they took and returned is reserved too, so no later
// step can run the device out of memory: the cache gets gpu_memory_utilization of the device's
// memory less all of that (and less what other processes hold).
#pragma once

#include <cstdint>
#include <string>

#include "core/result.h"
#include "model/model.h"

namespace deepinfer {

struct StepLimits {
  int32_t max_num_seqs = 0;
  int32_t max_num_batched_tokens = 0;
  int32_t max_model_len = 0;
  int32_t block_size = 0;
};

struct MemoryPlan {
  int64_t kv_cache_bytes = 0;  // what the KV cache may take
  // For the start-up log line: the device's memory, what the dry run found in use after it (the
  // weights, kept activations and caches, anything else on the device) and the transient peak it
  // reserved beyond that.
  int64_t total_bytes = 0;
  int64_t used_bytes = 0;
  int64_t reserved_peak_bytes = 0;
  std::string summary() const;
};

// The dry run and the resulting budget on a device backend (model.backend().device_memory() set).
// Leaves the model with the scratch cache: the caller allocates the real one.
// requested_kv_bytes > 0 asks for exactly that many bytes: an error when the device cannot hold them
// beside the dry run's needs. Errors name the numbers and the flags that change them.
Result<MemoryPlan> plan_device_memory(CausalLM& model, const StepLimits& limits, double gpu_memory_utilization,
                                      int64_t requested_kv_bytes);

}  // namespace deepinfer
