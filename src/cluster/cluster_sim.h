// A discrete-event simulation of a disaggregated cluster: N prefill and M decode instances behind
// one BalancerPolicy, replaying a request trace. Prefill instances keep an LRU prefix cache and may
// load prefixes from a shared store; times come from a CostModel. Used by `deepinfer lb-sim`;
// docs/cluster.md defines every figure of the result.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cluster/balancer_policy.h"
#include "cluster/cost_model.h"
#include "cluster/request_trace.h"
#include "core/progress.h"

namespace deepinfer {

struct ClusterSimConfig {
  int32_t num_prefill_instances = 8;
  int32_t num_decode_instances = 4;
  int64_t prefix_cache_blocks = 1660;   // per prefill instance: ~850K tokens, an H200's KV room for the 8B shape
  bool shared_store = true;             // any prefill instance can load any prefix written before
  int64_t store_capacity_blocks = 0;    // 0: unbounded (the seeds' 3FS holds days of KV)
  double rate_scale = 1;                // arrivals at timestamp / rate_scale
  double prefill_step_budget_ms = 200;  // a prefill step's time budget; its chunk follows from it
  int64_t decode_kv_capacity_tokens =
      850000;  // per decode instance: 0.9 x 141 GB less 15 GB of weights, 128 KiB a token
  int32_t decode_max_batch = 256;
  bool output_length_known = false;  // whether the router's decode choice sees each request's output length
  CostModel cost_model;

  nlohmann::json to_json() const;
};

struct ClusterSimResult {
  std::string policy;
  int64_t num_requests = 0;
  int64_t num_finished = 0;
  int64_t input_tokens = 0;
  int64_t cached_tokens = 0;        // input tokens reused from a cache (local or shared store)
  int64_t local_cached_tokens = 0;  // of which from the instance's own cache
  int64_t computed_prefill_tokens = 0;
  int64_t output_tokens = 0;     // as the trace asks
  int64_t generated_tokens = 0;  // as simulated: the prefill's first token plus every decode step's
  double ttft_p50_ms = 0, ttft_p99_ms = 0;
  double tpot_p50_ms = 0, tpot_p99_ms = 0;
  double makespan_ms = 0;       // first arrival to last finish
  double throughput_tok_s = 0;  // (input + output tokens) / makespan
  double output_tok_s = 0;
  double prefill_busy_max_over_mean = 0;   // per-instance busy time, busiest over the mean
  double decode_tokens_max_over_mean = 0;  // per-instance generated tokens, busiest over the mean
  double prefix_hit_rate = 0;              // cached_tokens / input_tokens
  double prefill_work_ms = 0;              // busy time of all prefill instances together
  double prefill_utilization = 0;          // prefill_work_ms / (instances x the last prefill's end)
  double balanced_fraction = 0;            // perfectly balanced prefill makespan / the simulated one

  nlohmann::json to_json() const;
};

// Replays the trace (in arrival order) to the end: every request finishes. The policy is used as
// a router would, its state carried from call to call. progress, when given, advances by one per
// finished request.
ClusterSimResult simulate_cluster(const std::vector<TraceRequest>& trace, const ClusterSimConfig& config,
                                  BalancerPolicy& policy, ProgressBar* progress);

}  // namespace deepinfer
