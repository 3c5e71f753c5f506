// SeedsPolicy's prefill rules (buckets, quota pull, least-loaded) and its decode rule.
#include "cluster/seeds_policy.h"

#include <algorithm>
#include <optional>

namespace deepinfer {

double SeedsPolicy::estimated_prefill_ms(const RoutingRequest& request) const {
  const int64_t cached =
      std::clamp<int64_t>(request.shared_cached_tokens, 0, std::max<int64_t>(request.input_tokens - 1, 0));
  return cost_model_.prefill_ms(request.input_tokens - cached, cached) + cost_model_.store_load_ms(cached);
}

size_t SeedsPolicy::end_of_group(std::span<const InstanceLoad> instances, size_t start, size_t last) const {
  // Instances that name their DP group are grouped by it; the others in runs of group_size.
  const int64_t group = instances[start].dp_group;
  const size_t limit = group < 0 ? std::min(start + static_cast<size_t>(std::max(options_.group_size, 1)), last) : last;
  size_t end = start + 1;
  while (end < limit && instances[end].dp_group == group) ++end;
  return end;
}

std::optional<size_t> SeedsPolicy::choose_prefill(const RoutingRequest& request,
                                                  std::span<const InstanceLoad> instances) {
  const int bucket = LengthBuckets::bucket_of(request.input_tokens);
  buckets_.advance_to(request.now_ms);
  // Demand counts when a request arrives, held or not, so a starved bucket still asks for more.
  if (!request.is_retry) buckets_.add_demand(bucket, estimated_prefill_ms(request));
  const auto [first, last] = buckets_.instances_for(bucket, instances.size());

  // (2) The group with the most compute quota left pulls the request; none with any: hold it.
  size_t best_group = first;
  size_t best_group_end = first;
  double best_quota_ms = 0;
  for (size_t group = first; group < last;) {
    const size_t group_end = end_of_group(instances, group, last);
    double quota_ms = 0;
    for (size_t i = group; i < group_end; ++i) {
      quota_ms += std::max(0.0, options_.quota_ms - instances[i].queued_prefill_ms);
    }
    if (quota_ms > best_quota_ms) {
      best_quota_ms = quota_ms;
      best_group = group;
      best_group_end = group_end;
    }
    group = group_end;
  }
  if (best_quota_ms <= 0) return std::nullopt;
  // (3) Inside it, the DP process with the least queued compute.
  size_t best = best_group;
  for (size_t i = best_group + 1; i < best_group_end; ++i) {
    if (instances[i].queued_prefill_ms < instances[best].queued_prefill_ms) best = i;
  }
  return best;
}

size_t SeedsPolicy::choose_decode(const RoutingRequest& request, std::span<const InstanceLoad> instances) {
  const int64_t context_tokens = request.input_tokens + request.output_tokens_estimate;
  // Short or long against the mean context of the requests running now.
  int64_t running = 0;
  int64_t kv_used = 0;
  bool any_fits = false;
  for (const InstanceLoad& instance : instances) {
    running += instance.num_running_requests;
    kv_used += instance.kv_tokens_used;
    any_fits = any_fits || instance.kv_tokens_free >= context_tokens;
  }
  const bool is_long = running == 0 || context_tokens * running > kv_used;
  const auto better = [&](const InstanceLoad& a, const InstanceLoad& b) {
    if (is_long) {
      if (a.kv_tokens_used != b.kv_tokens_used) return a.kv_tokens_used < b.kv_tokens_used;
      return a.num_running_requests < b.num_running_requests;
    }
    if (a.num_running_requests != b.num_running_requests) return a.num_running_requests < b.num_running_requests;
    return a.kv_tokens_used > b.kv_tokens_used;
  };
  std::optional<size_t> best;
  for (size_t i = 0; i < instances.size(); ++i) {
    if (any_fits && instances[i].kv_tokens_free < context_tokens) continue;
    if (!best || better(instances[i], instances[*best])) best = i;
  }
  return *best;
}

}  // namespace deepinfer
