// `deepinfer lb-sim`: replays a Mooncake-format request trace through a simulated cluster of
// prefill and decode instances under each load-balancing policy and prints their figures side by
// side (docs/cluster.md, "load-balancing simulator").
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "args.h"
#include "cluster/cluster_sim.h"
#include "cluster/seeds_policy.h"
#include "commands.h"
#include "core/progress.h"
#include "session.h"

namespace deepinfer::cli {
namespace {

constexpr const char* kUsage = R"(usage: deepinfer lb-sim --trace FILE.jsonl [flags]
Replays a Mooncake-format trace (one JSON object a line: timestamp ms, input_length, output_length,
hash_ids of 512-token prefix blocks) through a discrete-event simulation of N prefill and M decode
instances under each policy, and prints TTFT / TPOT percentiles, throughput, per-instance balance,
prefix hit rate and the fraction of perfectly balanced throughput (docs/cluster.md defines them).

  --policies LIST          comma-separated, from: seeds (the default policy), round-robin,
                           least-loaded, prefix-affinity, single (all to one instance)
                           [seeds,round-robin,least-loaded,prefix-affinity]
  --prefill-instances N    [8]
  --decode-instances M     [half the prefill instances, at least 1]
  --rate-scale X           arrivals at timestamp / X: X > 1 raises the load [1]
  --requests N             replay only the first N requests [all]
  --cache-blocks N         each prefill instance's prefix cache, in 512-token blocks [1660]
  --shared-store on|off    a shared KV store any prefill instance can load any prefix from [on]
  --store-blocks N         its capacity in blocks; 0: unbounded [0]
  --step-budget-ms MS      a prefill step's time budget, its chunk size following from it [200]
  --window-ms MS           the seeds' policy: the length buckets' demand window [10000]
  --quota-ms MS            the seeds' policy: compute each DP process may have queued [500]
  --group-size N           the seeds' policy: DP processes per group [8]
  --decode-kv-tokens N     each decode instance's KV capacity in tokens [850000]
  --decode-max-batch N     [256]
  --output-known           the decode choice sees each request's output length
  --cost-model FILE.json   replaces the cost model's fields that the file names (defaults:
                           Llama-3-8B shape on one H200, docs/cluster.md)
  --json FILE              also writes the configuration and every policy's figures, as one
                           line of JSON
)";

Result<int64_t> int_at_least(const Args& args, const std::string& flag, int64_t fallback, int64_t minimum) {
  Result<int64_t> value = args.get_int(flag, fallback);
  if (value.ok() && *value < minimum) {
    return Error{"flag " + flag + " must be at least " + std::to_string(minimum) + ", got " + std::to_string(*value)};
  }
  return value;
}

Result<double> positive_double(const Args& args, const std::string& flag, double fallback) {
  Result<double> value = args.get_double(flag, fallback);
  if (value.ok() && *value <= 0) return Error{"flag " + flag + " must be positive, got " + std::to_string(*value)};
  return value;
}

Result<std::vector<std::string>> policy_list(const Args& args) {
  const std::string list = args.find("--policies").value_or("seeds,round-robin,least-loaded,prefix-affinity");
  std::vector<std::string> names;
  std::stringstream stream(list);
  for (std::string name; std::getline(stream, name, ',');) {
    if (name.empty()) return Error{"flag --policies needs comma-separated names, got '" + list + "'"};
    names.push_back(name);
  }
  if (names.empty()) return Error{"flag --policies names no policy"};
  return names;
}

struct SimFlags {
  ClusterSimConfig config;
  SeedsPolicyOptions seeds;
  std::vector<std::string> policies;
  std::string trace_path;
  int64_t max_requests = 0;
};

Result<SimFlags> sim_flags_from_args(const Args& args) {
  SimFlags flags;
  ClusterSimConfig& config = flags.config;
  DI_ASSIGN(flags.trace_path, args.get_string("--trace"));
  DI_ASSIGN(flags.policies, policy_list(args));
  int64_t value = 0;
  DI_ASSIGN(value, int_at_least(args, "--prefill-instances", config.num_prefill_instances, 1));
  config.num_prefill_instances = static_cast<int32_t>(value);
  DI_ASSIGN(value, int_at_least(args, "--decode-instances", std::max(1, config.num_prefill_instances / 2), 1));
  config.num_decode_instances = static_cast<int32_t>(value);
  DI_ASSIGN(config.rate_scale, positive_double(args, "--rate-scale", config.rate_scale));
  DI_ASSIGN(flags.max_requests, int_at_least(args, "--requests", 0, args.has("--requests") ? 1 : 0));
  DI_ASSIGN(config.prefix_cache_blocks, int_at_least(args, "--cache-blocks", config.prefix_cache_blocks, 1));
  const std::string store = args.find("--shared-store").value_or("on");
  if (store != "on" && store != "off") return Error{"flag --shared-store takes on or off, got '" + store + "'"};
  config.shared_store = store == "on";
  DI_ASSIGN(config.store_capacity_blocks, int_at_least(args, "--store-blocks", config.store_capacity_blocks, 0));
  DI_ASSIGN(config.prefill_step_budget_ms, positive_double(args, "--step-budget-ms", config.prefill_step_budget_ms));
  DI_ASSIGN(flags.seeds.window_ms, positive_double(args, "--window-ms", flags.seeds.window_ms));
  DI_ASSIGN(flags.seeds.quota_ms, positive_double(args, "--quota-ms", flags.seeds.quota_ms));
  DI_ASSIGN(value, int_at_least(args, "--group-size", flags.seeds.group_size, 1));
  flags.seeds.group_size = static_cast<int32_t>(value);
  DI_ASSIGN(config.decode_kv_capacity_tokens,
            int_at_least(args, "--decode-kv-tokens", config.decode_kv_capacity_tokens, 1));
  DI_ASSIGN(value, int_at_least(args, "--decode-max-batch", config.decode_max_batch, 1));
  config.decode_max_batch = static_cast<int32_t>(value);
  config.output_length_known = args.has("--output-known");
  if (const auto path = args.find("--cost-model")) DI_ASSIGN(config.cost_model, CostModel::from_json_file(*path));
  return flags;
}

void print_table(const std::vector<ClusterSimResult>& results) {
  std::printf(
      "| policy | TTFT p50 ms | TTFT p99 ms | TPOT p50 ms | TPOT p99 ms | tok/s | prefill busy max/mean | decode tok "
      "max/mean | prefix hit rate | prefill utilization | balanced fraction |\n");
  std::printf("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
  for (const ClusterSimResult& r : results) {
    std::printf("| %s | %.0f | %.0f | %.1f | %.1f | %.0f | %.2f | %.2f | %.3f | %.3f | %.3f |\n", r.policy.c_str(),
                r.ttft_p50_ms, r.ttft_p99_ms, r.tpot_p50_ms, r.tpot_p99_ms, r.throughput_tok_s,
                r.prefill_busy_max_over_mean, r.decode_tokens_max_over_mean, r.prefix_hit_rate, r.prefill_utilization,
                r.balanced_fraction);
  }
}

}  // namespace

int run_lb_sim(int argc, char** argv) {
  if (wants_help(argc, argv, kUsage)) return 0;
  auto args =
      Args::parse(argc, argv,
                  {"--trace", "--policies", "--prefill-instances", "--decode-instances", "--rate-scale", "--requests",
                   "--cache-blocks", "--shared-store", "--store-blocks", "--step-budget-ms", "--window-ms",
                   "--quota-ms", "--group-size", "--decode-kv-tokens", "--decode-max-batch", "--cost-model", "--json"},
                  {"--output-known"});
  if (!args.ok()) return report_error("lb-sim", args.error());
  Result<SimFlags> flags = sim_flags_from_args(*args);
  if (!flags.ok()) return report_error("lb-sim", flags.error());
  std::vector<std::unique_ptr<BalancerPolicy>> policies;
  for (const std::string& name : flags->policies) {
    auto policy = make_balancer_policy(name, flags->config.cost_model, flags->seeds);
    if (!policy.ok()) return report_error("lb-sim", Error{"--policies: " + policy.error().message});
    policies.push_back(std::move(policy).value());
  }
  auto trace = read_mooncake_trace(flags->trace_path, flags->max_requests);
  if (!trace.ok()) return report_error("lb-sim", trace.error());

  const ClusterSimConfig& config = flags->config;
  std::printf("lb-sim: %s, %zu requests, %d prefill + %d decode instances, rate x%g, shared store %s\n\n",
              flags->trace_path.c_str(), trace->size(), config.num_prefill_instances, config.num_decode_instances,
              config.rate_scale, config.shared_store ? "on" : "off");
  std::vector<ClusterSimResult> results;
  {
    ProgressBar progress("lb-sim", trace->size() * policies.size(), "requests");
    for (const auto& policy : policies) {
      progress.set_detail(policy->name());
      results.push_back(simulate_cluster(*trace, config, *policy, &progress));
    }
  }
  print_table(results);

  if (const auto path = args->find("--json")) {
    // The trace's file name only: the JSON lands in docs/ and should not carry this machine's paths.
    nlohmann::json out = {{"trace", std::filesystem::path(flags->trace_path).filename().string()},
                          {"num_requests", trace->size()},
                          {"config", config.to_json()},
                          {"seeds_policy",
                           {{"window_ms", flags->seeds.window_ms},
                            {"quota_ms", flags->seeds.quota_ms},
                            {"group_size", flags->seeds.group_size}}},
                          {"results", nlohmann::json::array()}};
    for (const ClusterSimResult& result : results) out["results"].push_back(result.to_json());
    std::ofstream file(*path);
    if (!(file << out.dump() << '\n')) return report_error("lb-sim", Error{"cannot write --json " + *path});
  }
  return 0;
}

}  // namespace deepinfer::cli
