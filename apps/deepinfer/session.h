// What the model-running subcommands share: flag sets, loading a model on a device, errors.
#pragma once

#include <cstdio>
#include <memory>
#include <set>
#include <string>

#include "args.h"
#include "deepinfer/llm.h"
#include "engine/data_parallel.h"
#include "kvstore/kv_store.h"
#include "model/model.h"

namespace deepinfer::cli {

struct LoadedModel {
  DataParallelGroup data_parallel;  // declared first: the model's MoE layers use its group
  std::unique_ptr<Backend> backend;
  std::unique_ptr<CausalLM> model;
};

// Flags every model command takes: --model, --device, --threads; and --batch-invariant.
std::set<std::string> model_value_flags(std::set<std::string> extra);
std::set<std::string> model_bool_flags(std::set<std::string> extra);

// The step loop --async-scheduling / --no-async-scheduling ask for; neither: pipelined on a GPU
// (--device cuda), where it measured faster (docs/benchmarks.md), synchronous elsewhere.
Result<bool> async_scheduling_from_args(const Args& args);

// Speculative decoding's flags: --speculative-tokens K (0, the default: off) and --spec-varlen on|off
// (default on: DSpark's confidence-scheduled verification; off: every sequence verifies K drafts).
inline constexpr const char* kSpeculativeTokensFlag = "--speculative-tokens";
inline constexpr const char* kSpecVarlenFlag = "--spec-varlen";
struct SpeculativeFlags {
  int32_t num_tokens = 0;
  bool varlen = true;
};
Result<SpeculativeFlags> speculative_from_args(const Args& args);

// Adds the persistent KV store's flags (--kv-cache-dir, --kv-cache-host-bytes,
// --kv-cache-disk-bytes, --kv-cache-backend, --kv-cache-load auto|always) to a command's value flags.
std::set<std::string> kv_store_value_flags(std::set<std::string> extra);
// The store those flags ask for (off unless --kv-cache-dir or a redis:// backend is given), keyed
// to model_dir's weights and tokenizer. Errors name the bad flag.
Result<KvStoreConfig> kv_store_config_from_args(const Args& args, const std::string& model_dir);
// The same store set on config's kv_cache_* fields (model_dir: config.model_dir).
Result<void> apply_kv_store_flags(const Args& args, LLMConfig& config);

// The KV cache's memory: --kv-cache-bytes N (0, the default: automatic) and --gpu-memory-utilization F
// (default 0.9; on a device, the fraction of its memory the engine may hold, the KV cache taking
// what a dry run of the heaviest step leaves). Errors name the flag.
struct CacheMemory {
  int64_t kv_cache_bytes = 0;
  double gpu_memory_utilization = 0.9;
};
Result<CacheMemory> cache_memory_from_args(const Args& args);

// The backend options the flags ask for (--batch-invariant).
Result<BackendOptions> backend_options_from_args(const Args& args);
// --kv-cache-dtype's value (default "auto"), checked; the error names the flag.
Result<std::string> kv_cache_dtype_from_args(const Args& args);

// Applies --threads, makes the --device backend (default cpu) and loads --model, as this rank's
// share of data_parallel's group when it has one.
Result<LoadedModel> load_model_from_args(const Args& args, const DataParallelConfig& data_parallel = {});

// Prints "deepinfer <command>: error: <message>" to stderr and returns exit code 1.
int report_error(const char* command, const Error& error);

// True when argv asks for --help; prints usage to stdout.
bool wants_help(int argc, char** argv, const char* usage);

}  // namespace deepinfer::cli
