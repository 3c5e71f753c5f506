// The seeds' load balancing (DeepSeek's Q&A; docs/cluster.md has the rules and our reading).
// Prefill: (1) length buckets whose instance counts follow the last window's demand; (2) inside a
// bucket's instances, DP groups pull work by remaining compute quota, with no prefix affinity
// (the shared KV store lets any instance reuse any cached prefix); (3) inside the group, the
// least-loaded DP process. (4), the chunk size from a time budget, is the instance's own
// scheduler (CostModel::max_tokens_within), not the router's. Decode: a short request goes to the
// instance with the fewest requests (the longest cache on a tie), a long one to the instance with
// the least KV in use.
#pragma once

#include "cluster/balancer_policy.h"
#include "cluster/length_buckets.h"

namespace deepinfer {

struct SeedsPolicyOptions {
  double window_ms = 10000;  // the length buckets' demand window
  // Compute each DP process may have queued: a group's remaining quota is the sum over its
  // processes of what they lack of it, and a group with none left pulls nothing.
  double quota_ms = 500;
  // DP processes of one group (a node of 8 GPUs), for instances that do not name their group
  // (InstanceLoad::dp_group).
  int32_t group_size = 8;
};

class SeedsPolicy : public BalancerPolicy {
 public:
  SeedsPolicy(const CostModel& cost_model, SeedsPolicyOptions options)
      : cost_model_(cost_model), options_(options), buckets_(options.window_ms) {}

  std::string name() const override { return "seeds"; }
  // nullopt when no group of the request's bucket has quota left: the router holds it until one
  // does, which is the pull of rule (2) seen from the router.
  std::optional<size_t> choose_prefill(const RoutingRequest& request, std::span<const InstanceLoad> instances) override;
  size_t choose_decode(const RoutingRequest& request, std::span<const InstanceLoad> instances) override;
  const LengthBuckets& buckets() const { return buckets_; }

 private:
  // One past the last instance (below `last`) of the DP group that starts at `start`.
  size_t end_of_group(std::span<const InstanceLoad> instances, size_t start, size_t last) const;
  // Estimated compute of the prompt, taking the shared store's prefix as loaded, not computed.
  double estimated_prefill_ms(const RoutingRequest& request) const;

  CostModel cost_model_;
  SeedsPolicyOptions options_;
  LengthBuckets buckets_;
};

}  // namespace deepinfer
