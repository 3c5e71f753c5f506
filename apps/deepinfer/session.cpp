// Shared setup of the model-running subcommands.
#include "session.h"

#include <omp.h>

#include <cstring>

#include "engine/swa_replay.h"

namespace deepinfer::cli {

std::set<std::string> model_value_flags(std::set<std::string> extra) {
  extra.insert({"--model", "--device", "--threads", "--kv-cache-dtype"});
  return extra;
}

std::set<std::string> model_bool_flags(std::set<std::string> extra) {
  extra.insert({"--batch-invariant", "--no-cuda-graphs", "--host-sampling", "--dequantize-weights"});
  return extra;
}

Result<bool> async_scheduling_from_args(const Args& args) {
  const bool on = args.has("--async-scheduling");
  const bool off = args.has("--no-async-scheduling");
  if (on && off) return Error{"give --async-scheduling or --no-async-scheduling, not both"};
  if (on || off) return on;
  return args.find("--device").value_or("cpu") == "cuda";
}

Result<SpeculativeFlags> speculative_from_args(const Args& args) {
  SpeculativeFlags flags;
  auto tokens = args.get_int(kSpeculativeTokensFlag, 0);
  if (!tokens.ok()) return tokens.error();
  if (*tokens < 0 || *tokens > 16) return Error{"--speculative-tokens must be in [0, 16], got " + std::to_string(*tokens)};
  flags.num_tokens = static_cast<int32_t>(*tokens);
  const std::string varlen = args.find(kSpecVarlenFlag).value_or("on");
  if (varlen != "on" && varlen != "off") return Error{"--spec-varlen must be on or off, got '" + varlen + "'"};
  if (args.has(kSpecVarlenFlag) && flags.num_tokens == 0) return Error{"--spec-varlen needs --speculative-tokens K"};
  flags.varlen = varlen == "on";
  return flags;
}

std::set<std::string> kv_store_value_flags(std::set<std::string> extra) {
  extra.insert({"--kv-cache-dir", "--kv-cache-host-bytes", "--kv-cache-disk-bytes", "--kv-cache-backend",
                "--kv-cache-load", "--swa-replay-tokens"});
  return extra;
}

Result<KvStoreConfig> kv_store_config_from_args(const Args& args, const std::string& model_dir) {
  KvStoreConfig config;
  config.dir = args.find("--kv-cache-dir").value_or("");
  config.backend = args.find("--kv-cache-backend").value_or("disk");
  auto host_bytes = args.get_int("--kv-cache-host-bytes", config.host_bytes);
  if (!host_bytes.ok()) return host_bytes.error();
  auto disk_bytes = args.get_int("--kv-cache-disk-bytes", config.disk_bytes);
  if (!disk_bytes.ok()) return disk_bytes.error();
  if (*host_bytes < 0 || *disk_bytes < 0) return Error{"--kv-cache-host-bytes and --kv-cache-disk-bytes must be >= 0"};
  config.host_bytes = *host_bytes;
  config.disk_bytes = *disk_bytes;
  if (config.backend != "disk" && !config.backend.starts_with("redis://")) {
    return Error{"--kv-cache-backend '" + config.backend + "': expected disk or redis://host:port"};
  }
  const std::string load = args.find("--kv-cache-load").value_or("auto");
  if (load != "auto" && load != "always") return Error{"--kv-cache-load must be auto or always, got '" + load + "'"};
  config.cost_guard = load == "auto";
  if (const auto replay = args.find("--swa-replay-tokens")) {
    auto tokens = args.get_int("--swa-replay-tokens", 0);
    if (*replay == "exact") {
      config.swa_replay_tokens = kSwaReplayExact;
    } else if (!tokens.ok() || *tokens < 1 || *tokens > (int64_t{1} << 24)) {
      return Error{"--swa-replay-tokens must be a token count >= 1 or 'exact', got '" + *replay + "'"};
    } else {
      config.swa_replay_tokens = static_cast<int32_t>(*tokens);
    }
  }
  if (config.backend == "disk" && config.dir.empty() &&
      (args.has("--kv-cache-host-bytes") || args.has("--kv-cache-disk-bytes"))) {
    return Error{"--kv-cache-host-bytes and --kv-cache-disk-bytes need --kv-cache-dir DIR or a redis:// backend"};
  }
  config.batch_invariant = args.has("--batch-invariant");
  if (config.enabled()) {
    auto identity = fingerprint_model_dir(model_dir, model_hash_cache_path(config.dir));
    if (!identity.ok()) return identity.error();
    config.model_identity = *identity;
  }
  return config;
}

Result<void> apply_kv_store_flags(const Args& args, LLMConfig& config) {
  auto kv_store = kv_store_config_from_args(args, config.model_dir);
  if (!kv_store.ok()) return kv_store.error();
  config.kv_cache_dir = kv_store->dir;
  config.kv_cache_host_bytes = kv_store->host_bytes;
  config.kv_cache_disk_bytes = kv_store->disk_bytes;
  config.kv_cache_backend = kv_store->backend;
  config.kv_cache_cost_guard = kv_store->cost_guard;
  config.kv_cache_swa_replay_tokens = kv_store->swa_replay_tokens;
  return {};
}

Result<CacheMemory> cache_memory_from_args(const Args& args) {
  CacheMemory memory;
  auto bytes = args.get_int("--kv-cache-bytes", memory.kv_cache_bytes);
  if (!bytes.ok()) return bytes.error();
  if (*bytes < 0) return Error{"--kv-cache-bytes must be >= 0 (0: automatic), got " + std::to_string(*bytes)};
  auto utilization = args.get_double("--gpu-memory-utilization", memory.gpu_memory_utilization);
  if (!utilization.ok()) return utilization.error();
  if (!(*utilization > 0.0 && *utilization <= 1.0)) {
    return Error{"--gpu-memory-utilization must be in (0, 1], got " + std::to_string(*utilization)};
  }
  memory.kv_cache_bytes = *bytes;
  memory.gpu_memory_utilization = *utilization;
  return memory;
}

Result<std::string> kv_cache_dtype_from_args(const Args& args) {
  std::string name = args.find("--kv-cache-dtype").value_or("auto");
  if (auto parsed = parse_kv_cache_dtype(name); !parsed.ok())
    return Error{"--kv-cache-dtype: " + parsed.error().message};
  return name;
}

Result<BackendOptions> backend_options_from_args(const Args& args) {
  BackendOptions options;
  options.batch_invariant = args.has("--batch-invariant");
  options.graphs = !args.has("--no-cuda-graphs");
  options.fused_decode = !args.has("--no-fused-decode");  // a bench flag: measures the fusion
  options.packed_weights = !args.has("--dequantize-weights");
  auto kv_cache_dtype = kv_cache_dtype_from_args(args);
  if (!kv_cache_dtype.ok()) return kv_cache_dtype.error();
  options.kv_cache_dtype = parse_kv_cache_dtype(*kv_cache_dtype).value();
  return options;
}

Result<LoadedModel> load_model_from_args(const Args& args, const DataParallelConfig& data_parallel) {
  auto threads = args.get_int("--threads", 0);
  if (!threads.ok()) return threads.error();
  if (*threads < 0) return Error{"--threads must be >= 1 (0 or absent: all cores)"};
  if (*threads > 0) omp_set_num_threads(static_cast<int>(*threads));
  auto dir = args.get_string("--model");
  if (!dir.ok()) return dir.error();
  auto options = backend_options_from_args(args);
  if (!options.ok()) return options.error();
  auto backend = make_backend(args.find("--device").value_or("cpu"), *options);
  if (!backend.ok()) return backend.error();
  LoadedModel loaded;
  auto group = join_data_parallel_group(data_parallel, *dir, options->batch_invariant);
  if (!group.ok()) return group.error();
  loaded.data_parallel = std::move(*group);
  loaded.backend = std::move(*backend);
  auto model = load_model(*dir, *loaded.backend, data_parallel.rank == 0, loaded.data_parallel.expert_parallel);
  if (!model.ok()) return model.error();
  loaded.model = std::move(*model);
  return loaded;
}

int report_error(const char* command, const Error& error) {
  std::fprintf(stderr, "deepinfer %s: error: %s\n", command, error.message.c_str());
  return 1;
}

bool wants_help(int argc, char** argv, const char* usage) {
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--help") == 0 || std::strcmp(argv[i], "-h") == 0) {
      std::fputs(usage, stdout);
      return true;
    }
  }
  return false;
}

}  // namespace deepinfer::cli
