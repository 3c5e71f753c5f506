// The baseline policies' choices.
#include "cluster/baseline_policies.h"

namespace deepinfer {
namespace {

size_t fewest_queued_prefill_tokens(std::span<const InstanceLoad> instances) {
  size_t best = 0;
  for (size_t i = 1; i < instances.size(); ++i) {
    if (instances[i].queued_prefill_tokens < instances[best].queued_prefill_tokens) best = i;
  }
  return best;
}

}  // namespace

std::optional<size_t> RoundRobinPolicy::choose_prefill(const RoutingRequest&, std::span<const InstanceLoad> instances) {
  return next_prefill_++ % instances.size();
}

size_t RoundRobinPolicy::choose_decode(const RoutingRequest&, std::span<const InstanceLoad> instances) {
  return next_decode_++ % instances.size();
}

std::optional<size_t> LeastLoadedPolicy::choose_prefill(const RoutingRequest&,
                                                        std::span<const InstanceLoad> instances) {
  return fewest_queued_prefill_tokens(instances);
}

size_t LeastLoadedPolicy::choose_decode(const RoutingRequest&, std::span<const InstanceLoad> instances) {
  return least_loaded_decode_instance(instances);
}

std::optional<size_t> PrefixAffinityPolicy::choose_prefill(const RoutingRequest& request,
                                                           std::span<const InstanceLoad> instances) {
  size_t best = 0;
  for (size_t i = 1; i < instances.size(); ++i) {
    const InstanceLoad& a = instances[i];
    const InstanceLoad& b = instances[best];
    if (a.cached_prefix_tokens > b.cached_prefix_tokens ||
        (a.cached_prefix_tokens == b.cached_prefix_tokens && a.queued_prefill_tokens < b.queued_prefill_tokens)) {
      best = i;
    }
  }
  if (2 * instances[best].cached_prefix_tokens >= request.input_tokens && instances[best].cached_prefix_tokens > 0) {
    return best;
  }
  return fewest_queued_prefill_tokens(instances);
}

size_t PrefixAffinityPolicy::choose_decode(const RoutingRequest&, std::span<const InstanceLoad> instances) {
  return least_loaded_decode_instance(instances);
}

}  // namespace deepinfer
