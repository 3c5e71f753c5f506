// The policies by name, and the decode choice the least-loaded policies share.
#include "cluster/balancer_policy.h"

#include "cluster/baseline_policies.h"
#include "cluster/seeds_policy.h"

namespace deepinfer {

const std::vector<std::string>& balancer_policy_names() {
  static const std::vector<std::string> kNames = {"seeds", "round-robin", "least-loaded", "prefix-affinity", "single"};
  return kNames;
}

Result<std::unique_ptr<BalancerPolicy>> make_balancer_policy(const std::string& name, const CostModel& cost_model,
                                                             const SeedsPolicyOptions& seeds_options) {
  if (name == "seeds") return std::unique_ptr<BalancerPolicy>(new SeedsPolicy(cost_model, seeds_options));
  if (name == "round-robin") return std::unique_ptr<BalancerPolicy>(new RoundRobinPolicy());
  if (name == "least-loaded") return std::unique_ptr<BalancerPolicy>(new LeastLoadedPolicy());
  if (name == "prefix-affinity") return std::unique_ptr<BalancerPolicy>(new PrefixAffinityPolicy());
  if (name == "single") return std::unique_ptr<BalancerPolicy>(new SingleInstancePolicy());
  std::string known;
  for (const std::string& policy : balancer_policy_names()) known += (known.empty() ? "" : ", ") + policy;
  return Error{"unknown balancer policy '" + name + "' (known: " + known + ")"};
}

size_t least_loaded_decode_instance(std::span<const InstanceLoad> instances) {
  size_t best = 0;
  for (size_t i = 1; i < instances.size(); ++i) {
    const InstanceLoad& a = instances[i];
    const InstanceLoad& b = instances[best];
    if (a.num_running_requests < b.num_running_requests ||
        (a.num_running_requests == b.num_running_requests && a.kv_tokens_used < b.kv_tokens_used)) {
      best = i;
    }
  }
  return best;
}

}  // namespace deepinfer
