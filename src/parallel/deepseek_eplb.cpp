// DeepSeek's EPLB policy, step by step as their eplb.py describes it (see the header). Where their
// code leaves an order to torch, this takes the lowest index first: torch's argmax does too, but
// its sort is not stable, so copies of one expert (equal weights) may take their packed slots in
// another order there: the same phy2log and logcnt, an expert's copies permuted in log2phy.
#include "parallel/deepseek_eplb.h"

#include <algorithm>
#include <numeric>
#include <string>

#include "core/check.h"

namespace deepinfer {

namespace {

std::vector<int32_t> inverse_permutation(const std::vector<int32_t>& permutation) {
  std::vector<int32_t> inverse(permutation.size(), -1);
  for (size_t i = 0; i < permutation.size(); ++i) {
    inverse[static_cast<size_t>(permutation[i])] = static_cast<int32_t>(i);
  }
  return inverse;
}

std::string shape_error(const std::string& what) { return "DeepSeek EPLB: " + what; }

}  // namespace

BalancedPacking deepseek_balanced_packing(const std::vector<float>& weights, int32_t num_packs) {
  const auto num_items = static_cast<int32_t>(weights.size());
  DI_CHECK(num_packs > 0 && num_items % num_packs == 0, num_items << " items into " << num_packs << " packs");
  const int32_t items_per_pack = num_items / num_packs;
  BalancedPacking packing;
  if (items_per_pack == 1) {
    packing.pack_of.resize(weights.size());
    std::iota(packing.pack_of.begin(), packing.pack_of.end(), 0);
    packing.slot_in_pack.assign(weights.size(), 0);
    return packing;
  }
  std::vector<int32_t> order(weights.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return weights[a] > weights[b]; });

  packing.pack_of.assign(weights.size(), -1);
  packing.slot_in_pack.assign(weights.size(), -1);
  std::vector<float> pack_weight(static_cast<size_t>(num_packs), 0.0F);
  std::vector<int32_t> pack_items(static_cast<size_t>(num_packs), 0);
  for (const int32_t item : order) {
    int32_t lightest = -1;
    for (int32_t pack = 0; pack < num_packs; ++pack) {
      if (pack_items[pack] < items_per_pack && (lightest < 0 || pack_weight[pack] < pack_weight[lightest])) {
        lightest = pack;
      }
    }
    packing.pack_of[item] = lightest;
    packing.slot_in_pack[item] = pack_items[lightest];
    pack_weight[lightest] += weights[item];
    ++pack_items[lightest];
  }
  return packing;
}

Replication deepseek_replicate_experts(const std::vector<float>& weights, int32_t num_physical) {
  const auto num_logical = static_cast<int32_t>(weights.size());
  DI_CHECK(num_physical >= num_logical, num_physical << " slots for " << num_logical << " experts");
  Replication replication;
  replication.physical_to_logical.resize(static_cast<size_t>(num_physical));
  std::iota(replication.physical_to_logical.begin(), replication.physical_to_logical.begin() + num_logical, 0);
  replication.replica_rank.assign(static_cast<size_t>(num_physical), 0);
  replication.logical_count.assign(weights.size(), 1);
  for (int32_t slot = num_logical; slot < num_physical; ++slot) {
    int32_t hottest = 0;
    float hottest_load = weights[0] / static_cast<float>(replication.logical_count[0]);
    for (int32_t e = 1; e < num_logical; ++e) {
      const float load = weights[e] / static_cast<float>(replication.logical_count[e]);
      if (load > hottest_load) {
        hottest = e;
        hottest_load = load;
      }
    }
    replication.physical_to_logical[slot] = hottest;
    replication.replica_rank[slot] = replication.logical_count[hottest]++;
  }
  return replication;
}

Result<DeepSeekEplbTables> deepseek_rebalance_experts(const std::vector<float>& weights, int32_t num_physical,
                                                      int32_t num_groups, int32_t num_nodes, int32_t num_gpus) {
  const auto num_logical = static_cast<int32_t>(weights.size());
  if (num_logical <= 0 || num_groups <= 0 || num_nodes <= 0 || num_gpus <= 0) {
    return Error{shape_error("experts, groups, nodes and GPUs must all be positive")};
  }
  if (num_physical < num_logical) {
    return Error{shape_error(std::to_string(num_physical) + " physical slots cannot hold " +
                             std::to_string(num_logical) + " experts")};
  }
  if (num_physical % num_gpus != 0) {
    return Error{shape_error(std::to_string(num_physical) + " physical experts do not split over " +
                             std::to_string(num_gpus) + " GPUs")};
  }
  // Their entry point: hierarchical when the groups split over the nodes, else one global level.
  if (num_groups % num_nodes != 0) {
    num_groups = 1;
    num_nodes = 1;
  }
  if (num_logical % num_groups != 0) {
    return Error{shape_error(std::to_string(num_logical) + " experts do not form " + std::to_string(num_groups) +
                             " equal groups")};
  }
  if (num_gpus % num_nodes != 0) {
    return Error{shape_error(std::to_string(num_gpus) + " GPUs do not split over " + std::to_string(num_nodes) +
                             " nodes")};
  }
  const int32_t group_size = num_logical / num_groups;
  const int32_t groups_per_node = num_groups / num_nodes;
  const int32_t logical_per_node = num_logical / num_nodes;
  const int32_t physical_per_node = num_physical / num_nodes;
  const int32_t gpus_per_node = num_gpus / num_nodes;
  const int32_t physical_per_gpu = num_physical / num_gpus;

  // Step 1: groups of consecutive experts to nodes. The node-major order of the packed groups
  // renumbers the experts ("mlog"): node n holds mlog [n * logical_per_node, (n+1) * ...).
  std::vector<float> group_weights(static_cast<size_t>(num_groups), 0.0F);
  for (int32_t e = 0; e < num_logical; ++e) group_weights[e / group_size] += weights[e];
  const BalancedPacking group_packing = deepseek_balanced_packing(group_weights, num_nodes);
  std::vector<int32_t> logical_to_mlog(weights.size());
  for (int32_t e = 0; e < num_logical; ++e) {
    const int32_t group = e / group_size;
    logical_to_mlog[e] =
        (group_packing.pack_of[group] * groups_per_node + group_packing.slot_in_pack[group]) * group_size +
        e % group_size;
  }
  const std::vector<int32_t> mlog_to_logical = inverse_permutation(logical_to_mlog);

  DeepSeekEplbTables tables;
  tables.physical_to_logical.assign(static_cast<size_t>(num_physical), -1);
  std::vector<int32_t> replica_rank(static_cast<size_t>(num_physical), -1);
  std::vector<int32_t> mlog_count(weights.size(), 0);
  for (int32_t node = 0; node < num_nodes; ++node) {
    // Step 2: replicas inside the node.
    std::vector<float> node_weights(static_cast<size_t>(logical_per_node));
    for (int32_t j = 0; j < logical_per_node; ++j) {
      node_weights[j] = weights[mlog_to_logical[node * logical_per_node + j]];
    }
    const Replication replication = deepseek_replicate_experts(node_weights, physical_per_node);
    // Step 3: the node's physical experts to its GPUs, each weighing its expert's share.
    std::vector<float> physical_weights(static_cast<size_t>(physical_per_node));
    for (int32_t j = 0; j < physical_per_node; ++j) {
      const int32_t local = replication.physical_to_logical[j];
      physical_weights[j] = node_weights[local] / static_cast<float>(replication.logical_count[local]);
    }
    const BalancedPacking gpu_packing = deepseek_balanced_packing(physical_weights, gpus_per_node);
    for (int32_t j = 0; j < physical_per_node; ++j) {
      const int32_t slot =
          node * physical_per_node + gpu_packing.pack_of[j] * physical_per_gpu + gpu_packing.slot_in_pack[j];
      tables.physical_to_logical[slot] = mlog_to_logical[node * logical_per_node + replication.physical_to_logical[j]];
      replica_rank[slot] = replication.replica_rank[j];
    }
    for (int32_t j = 0; j < logical_per_node; ++j) {
      mlog_count[node * logical_per_node + j] = replication.logical_count[j];
    }
  }

  tables.logical_count.resize(weights.size());
  tables.logical_to_physical.resize(weights.size());
  for (int32_t e = 0; e < num_logical; ++e) {
    tables.logical_count[e] = mlog_count[logical_to_mlog[e]];
    tables.logical_to_physical[e].assign(static_cast<size_t>(tables.logical_count[e]), -1);
  }
  for (int32_t slot = 0; slot < num_physical; ++slot) {
    tables.logical_to_physical[tables.physical_to_logical[slot]][replica_rank[slot]] = slot;
  }
  return tables;
}

Result<ExpertPlacement> deepseek_placement(const std::vector<float>& weights, int32_t num_physical, int32_t num_groups,
                                           int32_t num_nodes, int32_t num_gpus) {
  DeepSeekEplbTables tables;
  DI_ASSIGN(tables, deepseek_rebalance_experts(weights, num_physical, num_groups, num_nodes, num_gpus));
  ExpertPlacement placement;
  placement.num_logical_experts = static_cast<int32_t>(weights.size());
  placement.num_ranks = num_gpus;
  placement.slots_per_rank = num_physical / num_gpus;
  placement.physical_to_logical = std::move(tables.physical_to_logical);
  DI_TRY(placement.validate());
  return placement;
}

}  // namespace deepinfer
