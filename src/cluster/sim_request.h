// What the cluster simulation records per request and per instance, and the summary of a run
// into ClusterSimResult. Internal to cluster_sim*.cpp.
#pragma once

#include <cstdint>
#include <vector>

#include "cluster/cluster_sim.h"

namespace deepinfer {

struct SimRequest {
  const TraceRequest* trace = nullptr;
  double arrival_ms = 0;
  int64_t estimated_new_tokens = 0;  // the prompt tokens to compute, as estimated when it was routed
  double estimated_prefill_ms = 0;   // and their compute time
  bool prefill_started = false;
  int64_t cached_tokens = 0;
  int64_t local_cached_tokens = 0;
  int64_t computed_tokens = 0;  // new prompt tokens computed so far
  double prefill_work_ms = 0;   // prefill-instance time spent on it, step overhead shared by tokens
  double first_token_ms = -1;   // its prefill's end
  double finish_ms = -1;
  int64_t generated_tokens = 0;

  int64_t final_context_tokens() const { return trace->input_tokens + trace->output_tokens; }
};

struct SimInstances {
  std::vector<double> prefill_busy_ms;
  std::vector<int64_t> decode_generated_tokens;
};

ClusterSimResult summarise_cluster_sim(const std::vector<SimRequest>& requests, const SimInstances& instances);

}  // namespace deepinfer
