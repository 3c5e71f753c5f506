// The load balancer's policy: which prefill instance computes a request's prompt, and which
// decode instance continues it. The seeds' policy is the default; the baselines are there to
// compare it with (docs/cluster.md).
#pragma once

#include <cstddef>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "cluster/cost_model.h"
#include "cluster/routing.h"
#include "core/result.h"

namespace deepinfer {

class BalancerPolicy {
 public:
  virtual ~BalancerPolicy() = default;
  virtual std::string name() const = 0;
  // Whether choose_prefill reads InstanceLoad::cached_prefix_tokens (the caller may skip the
  // per-instance prefix lookups otherwise).
  virtual bool reads_cached_prefix() const { return false; }
  // Each returns an index into `instances` (non-empty, one snapshot per instance, in a fixed order
  // between calls). They may update the policy's own state (a cursor, a demand window): not
  // thread-safe; one router thread owns a policy.
  // choose_prefill may instead return nullopt: no instance should take the request yet (the seeds'
  // instances pull work when they have quota). The router then holds it and asks again, in arrival
  // order, whenever an instance's load drops.
  virtual std::optional<size_t> choose_prefill(const RoutingRequest& request,
                                               std::span<const InstanceLoad> instances) = 0;
  virtual size_t choose_decode(const RoutingRequest& request, std::span<const InstanceLoad> instances) = 0;
};

// The names make_balancer_policy accepts; the first is the default.
const std::vector<std::string>& balancer_policy_names();
struct SeedsPolicyOptions;
// An unknown name is an error listing the known ones. cost_model and seeds_options configure the
// seeds' policy (cost_model: how it turns tokens into compute time).
Result<std::unique_ptr<BalancerPolicy>> make_balancer_policy(const std::string& name, const CostModel& cost_model,
                                                             const SeedsPolicyOptions& seeds_options);

// The decode choice of the least-loaded policies: the fewest running requests, then the least
// KV in use, then the lowest index.
size_t least_loaded_decode_instance(std::span<const InstanceLoad> instances);

}  // namespace deepinfer
