// The baselines the seeds' policy is compared with: round-robin, least-loaded, prefix-affinity,
// and single (everything to the first instance: the worst balance, as a reference point).
#pragma once

#include "cluster/balancer_policy.h"

namespace deepinfer {

// Prefill and decode each cycle through the instances.
class RoundRobinPolicy : public BalancerPolicy {
 public:
  std::string name() const override { return "round-robin"; }
  std::optional<size_t> choose_prefill(const RoutingRequest& request, std::span<const InstanceLoad> instances) override;
  size_t choose_decode(const RoutingRequest& request, std::span<const InstanceLoad> instances) override;

 private:
  size_t next_prefill_ = 0;
  size_t next_decode_ = 0;
};

// Prefill: the fewest queued prompt tokens. Decode: least_loaded_decode_instance. Ties: lowest index.
class LeastLoadedPolicy : public BalancerPolicy {
 public:
  std::string name() const override { return "least-loaded"; }
  std::optional<size_t> choose_prefill(const RoutingRequest& request, std::span<const InstanceLoad> instances) override;
  size_t choose_decode(const RoutingRequest& request, std::span<const InstanceLoad> instances) override;
};

// Prefill as SGLang's cache-aware router without its load guard: the instance holding the longest
// cached prefix when that covers at least half the prompt (ties: fewest queued tokens), else the
// least-loaded one. Decode has no prefix to follow: as LeastLoadedPolicy.
class PrefixAffinityPolicy : public BalancerPolicy {
 public:
  std::string name() const override { return "prefix-affinity"; }
  bool reads_cached_prefix() const override { return true; }
  std::optional<size_t> choose_prefill(const RoutingRequest& request, std::span<const InstanceLoad> instances) override;
  size_t choose_decode(const RoutingRequest& request, std::span<const InstanceLoad> instances) override;
};

// Every request to instance 0.
class SingleInstancePolicy : public BalancerPolicy {
 public:
  std::string name() const override { return "single"; }
  std::optional<size_t> choose_prefill(const RoutingRequest&, std::span<const InstanceLoad>) override { return 0; }
  size_t choose_decode(const RoutingRequest&, std::span<const InstanceLoad>) override { return 0; }
};

}  // namespace deepinfer
