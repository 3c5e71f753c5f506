// The dry run behind the KV cache's size on a device backend.
#include "engine/memory_plan.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <sstream>
#include <vector>

#include "kvcache/block_pool.h"
#include "model/decode_graphs.h"

namespace deepinfer {
namespace {

// Pages of the scratch cache; every logical page of the dry run's block tables maps onto them, so
// attention reads max_model_len keys without a cache that holds them (their values do not matter).
constexpr int32_t kScratchBlocks = 4;
// The least prompt tokens per sequence on the CUDA backend's tensor-core prefill path, whose
// workspace grows with the number of sequences in the step.
constexpr int32_t kTensorCorePrefillTokens = 64;

double gib(int64_t bytes) { return static_cast<double>(bytes) / static_cast<double>(int64_t{1} << 30); }

// num_seqs sequences of tokens_per_seq new tokens, each ending at position max_model_len - 1.
ForwardBatch scratch_batch(const CausalLM& model, const StepLimits& limits, int32_t num_seqs, int32_t tokens_per_seq,
                           bool logits_on_every_row) {
  const int32_t bs = limits.block_size;
  const int32_t context = limits.max_model_len;
  const auto vocab = static_cast<int32_t>(model.config().vocab_size);
  ForwardBatch batch;
  batch.max_blocks_per_seq = blocks_for_tokens(context, bs);
  batch.query_start.push_back(0);
  int32_t row = 0;
  for (int32_t s = 0; s < num_seqs; ++s) {
    for (int32_t t = 0; t < tokens_per_seq; ++t, ++row) {
      const int32_t position = context - tokens_per_seq + t;
      batch.token_ids.push_back((s * 131 + t * 7) % vocab);
      batch.positions.push_back(position);
      batch.slot_mapping.push_back((position / bs) % kScratchBlocks * bs + position % bs);
      if (logits_on_every_row || t == tokens_per_seq - 1) batch.logit_rows.push_back(row);
    }
    batch.query_start.push_back(row);
    batch.seq_len.push_back(context);
    for (int32_t page = 0; page < batch.max_blocks_per_seq; ++page) batch.block_table.push_back(page % kScratchBlocks);
  }
  if (model.kv_cache_shape().num_swa_blocks > 0) {
    batch.swa_slot_mapping = batch.slot_mapping;
    batch.swa_block_table = batch.block_table;
  }
  return batch;
}

void run_logits(CausalLM& model, const ForwardBatch& batch) {
  std::vector<float> logits(batch.logit_rows.size() * static_cast<size_t>(model.config().vocab_size));
  model.forward(batch, logits.data());
}

void run_sampled(CausalLM& model, const ForwardBatch& batch) {
  std::vector<kernels::SampleParams> draws(batch.logit_rows.size());
  for (size_t i = 0; i < draws.size(); ++i) {
    draws[i].row = static_cast<int32_t>(i);
    draws[i].top_k = 50;
    draws[i].temperature = 0.8;
    draws[i].top_p = 0.95;
    draws[i].u = 0.5;
  }
  std::vector<int32_t> tokens(draws.size());
  std::vector<float> logits(batch.logit_rows.size() * static_cast<size_t>(model.config().vocab_size));
  model.forward_sampled(batch, draws, tokens.data(), {}, logits.data());
}

void dry_run(CausalLM& model, const StepLimits& limits) {
  const int32_t chunk = std::min(limits.max_num_batched_tokens, limits.max_model_len);
  run_logits(model, scratch_batch(model, limits, 1, chunk, /*logits_on_every_row=*/true));
  const int32_t prefill_seqs = std::min(limits.max_num_seqs, chunk / kTensorCorePrefillTokens);
  if (prefill_seqs > 1) {
    run_logits(model, scratch_batch(model, limits, prefill_seqs, kTensorCorePrefillTokens, true));
  }
  // Every graph bucket (powers of two) up to the largest decode batch, then that batch itself.
  const int32_t max_decode = std::min(limits.max_num_seqs, limits.max_num_batched_tokens);
  for (int32_t n = 1; n < max_decode && n <= DecodeGraphs::kMaxBatch; n *= 2) {
    run_sampled(model, scratch_batch(model, limits, n, 1, false));
  }
  run_sampled(model, scratch_batch(model, limits, max_decode, 1, false));
}

}  // namespace

std::string MemoryPlan::summary() const {
  std::ostringstream out;
  out.precision(3);
  out << "device memory " << gib(total_bytes) << " GiB: " << gib(used_bytes)
      << " GiB in use after the dry run (weights, activations, workspaces, other processes), " << gib(reserved_peak_bytes)
      << " GiB reserved for its transient peak, KV cache " << gib(kv_cache_bytes) << " GiB";
  return out.str();
}

Result<MemoryPlan> plan_device_memory(CausalLM& model, const StepLimits& limits, double gpu_memory_utilization,
                                      int64_t requested_kv_bytes) {
  Backend& backend = model.backend();
  if (!(gpu_memory_utilization > 0.0 && gpu_memory_utilization <= 1.0)) {
    return Error{"--gpu-memory-utilization must be in (0, 1], got " + std::to_string(gpu_memory_utilization)};
  }
  const KvCacheShape scratch{kScratchBlocks, limits.block_size,
                             model.swa_kv_bytes_per_token() > 0 ? kScratchBlocks : 0};
  model.allocate_kv_cache(scratch);
  backend.reset_peak_memory();
  dry_run(model, limits);
  const std::optional<DeviceMemory> memory = backend.device_memory();
  if (!memory) return Error{"plan_device_memory needs a device backend"};
  // The scratch cache goes when the caller allocates the real one.
  const int64_t scratch_bytes = model.kv_bytes_per_token() * limits.block_size * kScratchBlocks;

  MemoryPlan plan;
  plan.total_bytes = static_cast<int64_t>(memory->total_bytes);
  plan.used_bytes = static_cast<int64_t>(memory->total_bytes - memory->free_bytes) - scratch_bytes;
  // Workspaces the dry run took and gave back to the device (blocks too large for the allocator's
  // cache) must still be there when a real step takes them again.
  plan.reserved_peak_bytes = std::max<int64_t>(
      0, static_cast<int64_t>(memory->peak_in_use_bytes) - static_cast<int64_t>(memory->in_use_bytes) -
             static_cast<int64_t>(memory->cached_bytes));
  const int64_t block_bytes = model.kv_bytes_per_token() * limits.block_size;
  const auto describe = [&] {
    std::ostringstream out;
    out.precision(3);
    out << gib(plan.used_bytes) << " GiB of the device's " << gib(plan.total_bytes)
        << " GiB are in use after a dry run of the heaviest step (max_num_batched_tokens "
        << limits.max_num_batched_tokens << ", max_num_seqs " << limits.max_num_seqs << ", max_model_len "
        << limits.max_model_len << ") and " << gib(plan.reserved_peak_bytes) << " GiB more are its transient peak";
    return out.str();
  };
  if (requested_kv_bytes > 0) {
    const int64_t room = static_cast<int64_t>(memory->free_bytes + memory->cached_bytes) + scratch_bytes -
                         plan.reserved_peak_bytes;
    if (requested_kv_bytes > room) {
      std::ostringstream out;
      out.precision(3);
      out << "--kv-cache-bytes " << requested_kv_bytes << " (" << gib(requested_kv_bytes) << " GiB) does not fit: "
          << describe() << ", leaving " << gib(room) << " GiB";
      return Error{out.str()};
    }
    plan.kv_cache_bytes = requested_kv_bytes;
    return plan;
  }
  plan.kv_cache_bytes = static_cast<int64_t>(std::floor(gpu_memory_utilization * static_cast<double>(plan.total_bytes))) -
                        plan.used_bytes - plan.reserved_peak_bytes;
  if (plan.kv_cache_bytes < block_bytes) {
    std::ostringstream out;
    out.precision(3);
    out << "no device memory is left for the KV cache: " << describe() << ", and --gpu-memory-utilization "
        << gpu_memory_utilization << " allows " << gib(static_cast<int64_t>(gpu_memory_utilization *
                                                                              static_cast<double>(plan.total_bytes)))
        << " GiB; raise --gpu-memory-utilization or lower --max-num-batched-tokens, --max-num-seqs or --max-model-len";
    return Error{out.str()};
  }
  return plan;
}

}  // namespace deepinfer
