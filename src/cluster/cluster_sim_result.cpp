// The figures of a simulated run (docs/cluster.md defines each), and their JSON.
#include <algorithm>
#include <numeric>

#include "cluster/sim_request.h"
#include "core/percentile.h"

namespace deepinfer {

namespace {

template <typename T>
double max_over_mean(const std::vector<T>& values) {
  const double total = std::accumulate(values.begin(), values.end(), 0.0);
  if (values.empty() || total <= 0) return 1;
  return static_cast<double>(*std::max_element(values.begin(), values.end())) * static_cast<double>(values.size()) /
         total;
}

// The makespan of a perfectly balanced prefill stage, a lower bound on any schedule of the same
// work: N instances share all work at every moment like one server of rate N, so it cannot end
// before the work arriving at or after any a_i has drained (a_i + W(>= a_i) / N); and no prompt
// is split across instances, so not before any a_i + w_i either.
double balanced_prefill_makespan_ms(const std::vector<SimRequest>& requests, size_t num_instances) {
  double work_after_ms = 0;
  double makespan_ms = 0;
  for (auto request = requests.rbegin(); request != requests.rend(); ++request) {
    work_after_ms += request->prefill_work_ms;
    makespan_ms = std::max({makespan_ms, request->arrival_ms + work_after_ms / static_cast<double>(num_instances),
                            request->arrival_ms + request->prefill_work_ms});
  }
  return makespan_ms;
}

}  // namespace

ClusterSimResult summarise_cluster_sim(const std::vector<SimRequest>& requests, const SimInstances& instances) {
  ClusterSimResult result;
  result.num_requests = static_cast<int64_t>(requests.size());
  std::vector<double> ttft_ms;
  std::vector<double> tpot_ms;
  double last_prefill_ms = 0;
  for (const SimRequest& request : requests) {
    result.input_tokens += request.trace->input_tokens;
    result.cached_tokens += request.cached_tokens;
    result.local_cached_tokens += request.local_cached_tokens;
    result.computed_prefill_tokens += request.computed_tokens;
    result.output_tokens += request.trace->output_tokens;
    result.generated_tokens += request.generated_tokens;
    if (request.finish_ms < 0) continue;
    ++result.num_finished;
    ttft_ms.push_back(request.first_token_ms - request.arrival_ms);
    if (request.trace->output_tokens > 1) {
      tpot_ms.push_back((request.finish_ms - request.first_token_ms) /
                        static_cast<double>(request.trace->output_tokens - 1));
    }
    last_prefill_ms = std::max(last_prefill_ms, request.first_token_ms);
    result.makespan_ms = std::max(result.makespan_ms, request.finish_ms);
  }
  result.ttft_p50_ms = percentile(ttft_ms, 50);
  result.ttft_p99_ms = percentile(ttft_ms, 99);
  result.tpot_p50_ms = percentile(tpot_ms, 50);
  result.tpot_p99_ms = percentile(tpot_ms, 99);
  if (result.makespan_ms > 0) {
    result.throughput_tok_s =
        static_cast<double>(result.input_tokens + result.output_tokens) / result.makespan_ms * 1e3;
    result.output_tok_s = static_cast<double>(result.output_tokens) / result.makespan_ms * 1e3;
  }
  result.prefill_busy_max_over_mean = max_over_mean(instances.prefill_busy_ms);
  result.decode_tokens_max_over_mean = max_over_mean(instances.decode_generated_tokens);
  if (result.input_tokens > 0) {
    result.prefix_hit_rate = static_cast<double>(result.cached_tokens) / static_cast<double>(result.input_tokens);
  }
  result.prefill_work_ms = std::accumulate(instances.prefill_busy_ms.begin(), instances.prefill_busy_ms.end(), 0.0);
  const auto num_prefill = static_cast<double>(instances.prefill_busy_ms.size());
  if (last_prefill_ms > 0) {
    result.prefill_utilization = result.prefill_work_ms / (num_prefill * last_prefill_ms);
    result.balanced_fraction =
        balanced_prefill_makespan_ms(requests, instances.prefill_busy_ms.size()) / last_prefill_ms;
  }
  return result;
}

nlohmann::json ClusterSimConfig::to_json() const {
  return {{"prefill_instances", num_prefill_instances},
          {"decode_instances", num_decode_instances},
          {"prefix_cache_blocks", prefix_cache_blocks},
          {"shared_store", shared_store},
          {"store_capacity_blocks", store_capacity_blocks},
          {"rate_scale", rate_scale},
          {"prefill_step_budget_ms", prefill_step_budget_ms},
          {"decode_kv_capacity_tokens", decode_kv_capacity_tokens},
          {"decode_max_batch", decode_max_batch},
          {"output_length_known", output_length_known},
          {"cost_model", cost_model.to_json()}};
}

nlohmann::json ClusterSimResult::to_json() const {
  return {{"policy", policy},
          {"num_requests", num_requests},
          {"num_finished", num_finished},
          {"input_tokens", input_tokens},
          {"cached_tokens", cached_tokens},
          {"local_cached_tokens", local_cached_tokens},
          {"computed_prefill_tokens", computed_prefill_tokens},
          {"output_tokens", output_tokens},
          {"generated_tokens", generated_tokens},
          {"ttft_p50_ms", ttft_p50_ms},
          {"ttft_p99_ms", ttft_p99_ms},
          {"tpot_p50_ms", tpot_p50_ms},
          {"tpot_p99_ms", tpot_p99_ms},
          {"makespan_ms", makespan_ms},
          {"throughput_tok_s", throughput_tok_s},
          {"output_tok_s", output_tok_s},
          {"prefill_busy_max_over_mean", prefill_busy_max_over_mean},
          {"decode_tokens_max_over_mean", decode_tokens_max_over_mean},
          {"prefix_hit_rate", prefix_hit_rate},
          {"prefill_work_ms", prefill_work_ms},
          {"prefill_utilization", prefill_utilization},
          {"balanced_fraction", balanced_fraction}};
}

}  // namespace deepinfer
