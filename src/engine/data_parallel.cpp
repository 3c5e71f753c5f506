// join_data_parallel_group: the checks, the rendezvous, the placement file and the EPLB settings.
#include "engine/data_parallel.h"

#include <string>
#include <vector>

#include "parallel/eplb.h"
#include "weights/hf_config.h"

namespace deepinfer {
namespace {

bool has_moe_layers(const ModelConfig& config) {
  for (int64_t layer = 0; config.moe && layer < config.num_hidden_layers; ++layer) {
    if (config.moe->is_moe_layer(layer)) return true;
  }
  return false;
}

}  // namespace

Result<DataParallelGroup> join_data_parallel_group(const DataParallelConfig& config, const std::string& model_dir,
                                                   bool batch_invariant) {
  if (config.size < 1) return Error{"data-parallel size must be >= 1, not " + std::to_string(config.size)};
  if (config.rank < 0 || config.rank >= config.size) {
    return Error{"data-parallel rank " + std::to_string(config.rank) + " is outside 0.." +
                 std::to_string(config.size - 1)};
  }
  if (config.num_redundant_experts < 0) {
    return Error{"num_redundant_experts must be >= 0, not " + std::to_string(config.num_redundant_experts)};
  }
  if (config.eplb_window_steps < 1) {
    return Error{"eplb_window_steps must be >= 1, not " + std::to_string(config.eplb_window_steps)};
  }
  if (config.eplb_interval_steps < 0) {
    return Error{"eplb_interval_steps must be >= 0 (0: re-place only on request), not " +
                 std::to_string(config.eplb_interval_steps)};
  }
  auto transport = parse_exchange_transport(config.expert_parallel_transport);
  if (!transport.ok()) return Error{"expert_parallel_transport: " + transport.error().message};
  auto payload = parse_exchange_payload(config.expert_parallel_payload, batch_invariant);
  if (!payload.ok()) return Error{"expert_parallel_payload: " + payload.error().message};
  if (config.expert_parallel_fixed_tokens < 0) {
    return Error{"expert_parallel_fixed_tokens must be >= 0, not " +
                 std::to_string(config.expert_parallel_fixed_tokens)};
  }
  auto policy = parse_eplb_policy(config.eplb_policy);
  if (!policy.ok() || *policy == EplbPolicy::kContiguous) {
    return Error{"eplb_policy must be peak-aware or deepseek, not '" + config.eplb_policy + "'"};
  }
  // The model and the placement file are checked before the rendezvous, so every rank fails the
  // same way without one rank's exit breaking the others' connections mid-join.
  if (config.expert_parallel && config.size > 1) {
    auto model_config = ModelConfig::load(model_dir);
    if (!model_config.ok()) return model_config.error();
    if (!has_moe_layers(*model_config)) {
      return Error{model_config->architecture +
                   " has no MoE layers: expert parallelism needs a mixture-of-experts model"};
    }
  }
  std::vector<ExpertPlacement> placements;
  if (config.expert_parallel && !config.expert_placement_file.empty()) {
    auto loaded = load_placements(config.expert_placement_file);
    if (!loaded.ok()) return Error{"--expert-placement: " + loaded.error().message};
    placements = std::move(*loaded);
    for (size_t i = 0; i < placements.size(); ++i) {
      if (placements[i].num_ranks != config.size) {
        return Error{"--expert-placement: the expert placement of MoE layer " + std::to_string(i) + " is for " +
                     std::to_string(placements[i].num_logical_experts) + " experts on " +
                     std::to_string(placements[i].num_ranks) + " ranks, but the data-parallel size is " +
                     std::to_string(config.size)};
      }
    }
  }
  DataParallelGroup joined;
  if (config.size == 1) return joined;
  if (config.address.empty()) {
    return Error{"data-parallel size " + std::to_string(config.size) +
                 " needs a rendezvous address (a shared directory or redis://HOST:PORT)"};
  }
  GroupOptions options;
  options.rank = config.rank;
  options.world_size = config.size;
  options.rendezvous = config.address;
  options.host = config.host;
  options.group_name = config.group;
  auto group = connect_group(options);
  if (!group.ok()) return group.error();
  joined.group = std::move(*group);
  if (!config.expert_parallel) return joined;
  // Every rank must send rows of one size, and "auto" settles on each rank's own batch_invariant;
  // and every rank must pick the same rounds for fixed-size blocks.
  const std::vector<std::string> payloads = joined.group->all_gather(std::string(exchange_payload_name(*payload)));
  const std::vector<std::string> fixed_tokens =
      joined.group->all_gather(std::to_string(config.expert_parallel_fixed_tokens));
  for (size_t r = 1; r < payloads.size(); ++r) {
    if (payloads[r] != payloads[0]) {
      return Error{"expert-parallel payload: rank 0 sends " + payloads[0] + " rows, rank " + std::to_string(r) + " " +
                   payloads[r] + " rows (--expert-parallel-payload, or --batch-invariant on some ranks only)"};
    }
    if (fixed_tokens[r] != fixed_tokens[0]) {
      return Error{"expert-parallel fixed-size blocks: rank 0 sends them in rounds of up to " + fixed_tokens[0] +
                   " tokens, rank " + std::to_string(r) + " up to " + fixed_tokens[r] +
                   " (--expert-parallel-fixed-tokens)"};
    }
  }
  auto expert_parallel = std::make_shared<ExpertParallelism>();
  expert_parallel->group = joined.group;
  expert_parallel->num_redundant_experts = config.num_redundant_experts;
  expert_parallel->transport = *transport;
  expert_parallel->payload = *payload;
  expert_parallel->fixed_dispatch_tokens = config.expert_parallel_fixed_tokens;
  expert_parallel->eplb_window_steps = config.eplb_window_steps;
  expert_parallel->eplb_interval_steps = config.eplb_interval_steps;
  expert_parallel->eplb_policy = *policy;
  expert_parallel->placement_out_file = config.expert_placement_out_file;
  expert_parallel->placements = std::move(placements);
  joined.expert_parallel = std::move(expert_parallel);
  return joined;
}

}  // namespace deepinfer
