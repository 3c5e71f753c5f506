// deepinfer::LLM — the offline batch API: load a Hugging Face model directory once, then
// generate for many prompts with continuous batching, as a whole or as a stream of deltas.
//
//   auto llm = deepinfer::LLM::open({.model_dir = "/models/Qwen3-0.6B"}).value();
//   deepinfer::SamplingParams params;
//   params.max_tokens = 64;
//   auto results = llm->generate({{.text = "Hello"}}, {params}).value();
//   std::cout << results[0].outputs[0].text;
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/result.h"
#include "deepinfer/sampling_params.h"

namespace deepinfer {

// Data parallelism (docs/parallel.md): ranks with their own requests, KV cache and scheduler, one
// process each, meeting at a rendezvous; with expert_parallel the MoE layers' experts are spread
// over the ranks (DP attention, EP experts), and the ranks run their forwards together.
struct DataParallelConfig {
  int32_t size = 1;   // ranks in the group; 1: no group
  int32_t rank = 0;   // this process's rank
  // Where the ranks meet: a directory every rank shares, or redis://HOST:PORT.
  std::string address;
  std::string host = "127.0.0.1";  // the address other ranks reach this one at
  std::string group = "deepinfer";  // the group's keys at the rendezvous
  bool expert_parallel = false;
  // Extra expert slots per MoE layer for copies of hot experts (the default placement gives them
  // to experts 0, 1, ...; expert_placement_file or EPLB choose better).
  int32_t num_redundant_experts = 0;
  std::string expert_placement_file;  // parallel/expert_placement.h's JSON; empty: the default
  // How the MoE layers' token rows travel between ranks: "nccl" (GPU to GPU, one GPU per rank),
  // "host" (through host memory and Gloo) or "auto" (nccl where it can run, else host).
  std::string expert_parallel_transport = "auto";
  // The element type of those rows: "bf16" (half of float32's bytes), "fp8" (e4m3 with a scale per
  // 128 values on the way to the experts, bf16 back: DeepSeek's choice), "float32", or "auto":
  // float32 with batch_invariant (the group then gives one rank's bits), else bf16.
  std::string expert_parallel_payload = "auto";
  // Forward rounds whose busiest rank has at most this many tokens (decode steps) plan the MoE
  // layers' exchanges on the device: every rank sends every other a block of fixed size (room for
  // that many tokens' rows), empty rows included, so no routing or count goes through the host
  // first. Larger rounds exchange their counts first and send only their rows. 0: always the latter.
  int64_t expert_parallel_fixed_tokens = 256;
  // EPLB while running (docs/parallel.md), with expert_parallel: each MoE layer's expert load is
  // recorded over the last eplb_window_steps forward rounds, and every eplb_interval_steps rounds
  // (0: only on LLM::request_expert_rebalance) the ranks re-place the experts by it, with
  // eplb_policy "peak-aware" (ours) or "deepseek" (DeepSeek's eplb.py).
  int32_t eplb_window_steps = 1000;
  int64_t eplb_interval_steps = 10000;
  std::string eplb_policy = "peak-aware";
  // Not empty: rank 0 writes every MoE layer's placement there (expert_placement_file's format) at
  // load and after each re-placement.
  std::string expert_placement_out_file;
};

struct LLMConfig {
  std::string model_dir;
  std::string device = "cpu";            // "cpu", "ref" (scalar reference kernels) or "cuda"
  int32_t max_num_seqs = 64;             // sequences running at once
  int32_t max_num_batched_tokens = 2048; // tokens per engine step (chunked prefill budget)
  int32_t block_size = 128;              // KV page size in tokens
  // The KV cache's bytes; 0: 1 GiB on "cpu", on "cuda" what gpu_memory_utilization (the fraction of
  // the device's memory the engine may hold) leaves after a dry run of the heaviest step.
  int64_t kv_cache_bytes = 0;
  double gpu_memory_utilization = 0.9;
  int32_t max_model_len = 0;             // 0: the model's max_position_embeddings
  bool enable_prefix_caching = true;
  // Every request gives bit-identical tokens and logprobs alone or batched, whatever else runs
  // with it, how its prompt is chunked, cached or preempted (slower prefill on "cpu"; see
  // BackendOptions in runtime/backend.h and docs/benchmarks.md).
  bool batch_invariant = false;
  // The KV cache's element type: "auto" (float32 on the CPU; bf16 for 16-bit models on CUDA),
  // "float32", "bfloat16" or "fp8" (e4m3 with the checkpoint's k/v scales, else 1: a quarter of
  // float32's bytes). BackendOptions::kv_cache_dtype.
  std::string kv_cache_dtype = "auto";
  // --device cuda: decode steps replay captured CUDA graphs (false: op by op, for debugging).
  bool cuda_graphs = true;
  // FP8 and MXFP4 weights stay packed where the backend reads them so (false: dequantised at load,
  // two to eight times the memory; BackendOptions::packed_weights).
  bool packed_weights = true;
  // Tokens are drawn where the logits are (EngineConfig::device_sampling); false: on the host.
  bool device_sampling = true;
  // Pipelined steps: the model runs a decode step while the engine post-processes the one before
  // (EngineConfig::async_scheduling; the same tokens). Unset: on with device "cuda", where it
  // measured faster (docs/benchmarks.md), off on the CPU.
  std::optional<bool> async_scheduling;
  // Speculative decoding with the model's draft module (DeepSeek-V3's MTP; engine/speculator.h):
  // chains of up to speculative_tokens drafts (0: off), verified as DSpark schedules them
  // (spec_varlen) or all of them. With batch_invariant, spec_varlen must be false.
  int32_t speculative_tokens = 0;
  bool spec_varlen = true;
  bool show_progress = true;             // progress bars on stderr (loading; batches of 2+ prompts)
  // Persistent KV store below the prefix cache (docs/kvstore.md): on when kv_cache_dir names a
  // directory or kv_cache_backend is "redis://host:port".
  std::string kv_cache_dir;
  int64_t kv_cache_host_bytes = int64_t{1} << 30;
  int64_t kv_cache_disk_bytes = int64_t{64} << 30;
  std::string kv_cache_backend = "disk";
  bool kv_cache_cost_guard = true;  // load stored pages only when faster than recomputing them
  // Sliding-window models: prefix tokens a store hit replays to rebuild the sliding layers' KV;
  // 0: max(128, window), -1: exact (sliding layers x window) (docs/kvstore.md).
  int32_t kv_cache_swa_replay_tokens = 0;
  DataParallelConfig data_parallel;
};

// One prompt: text (needs the model's tokenizer) or token ids.
struct Prompt {
  std::string text;
  std::vector<int32_t> token_ids;  // used when not empty
};

struct TopLogprob {
  int32_t token_id = 0;
  double logprob = 0.0;
};

struct SampleResult {
  int32_t index = 0;
  std::vector<int32_t> token_ids;
  std::string text;                            // empty without a tokenizer
  std::vector<double> logprobs;                // of the chosen tokens, when params.logprobs is set
  std::vector<std::vector<TopLogprob>> top_logprobs;  // per token, params.logprobs entries
  std::string finish_reason;                   // "stop", "length", "abort"
  std::string stop_reason;                     // the stop string or stop token id that ended it
};

struct GenerationResult {
  std::vector<int32_t> prompt_token_ids;
  std::vector<SampleResult> outputs;  // n of them, by index
  int32_t num_cached_tokens = 0;      // prompt tokens served from the prefix cache
  // When params.prompt_logprobs is set: entry i scores prompt token i (none for token 0).
  std::vector<std::optional<std::vector<TopLogprob>>> prompt_logprobs;
  std::vector<std::optional<double>> prompt_token_logprobs;
  // Why the request failed before producing a token (its structured-output grammar did not
  // compile: an unsupported keyword, a timeout); empty when it ran. Its outputs are then empty
  // with finish_reason "abort".
  std::string error;
};

// A delta of one sample of one prompt, in generation order.
struct StreamEvent {
  size_t prompt_index = 0;
  int32_t sample_index = 0;
  std::vector<int32_t> new_token_ids;
  std::string new_text;
  bool finished = false;
  std::string finish_reason;
  std::string error;  // GenerationResult::error, on the failed request's finishing events
};

class LLM {
 public:
  // Loads the model (progress bar), its tokenizer when present, and sizes the KV cache.
  static Result<std::unique_ptr<LLM>> open(const LLMConfig& config);
  ~LLM();

  // params has one entry for all prompts or one per prompt. Results are in prompt order. Errors
  // (bad parameters, too-long prompts, text without a tokenizer) name the prompt's index; no
  // prompt runs unless all are valid. show_progress: a progress bar over 2+ prompts on stderr;
  // unset: config.show_progress (a caller that draws its own bar passes false).
  Result<std::vector<GenerationResult>> generate(const std::vector<Prompt>& prompts,
                                                 const std::vector<SamplingParams>& params,
                                                 std::optional<bool> show_progress = std::nullopt);

  // The same work as a stream: next() returns deltas as the engine produces them and nullopt at
  // the end. Not thread-safe; one stream at a time.
  class Stream {
   public:
    std::optional<StreamEvent> next();
    // Every prompt's result so far, in prompt order: complete once next() has returned nullopt.
    const std::vector<GenerationResult>& results() const;
    ~Stream();
    Stream(Stream&&) noexcept;
    Stream& operator=(Stream&&) noexcept;

   private:
    friend class LLM;
    struct Impl;
    explicit Stream(std::unique_ptr<Impl> impl);
    std::unique_ptr<Impl> impl_;
  };
  Result<Stream> stream(const std::vector<Prompt>& prompts, const std::vector<SamplingParams>& params,
                        std::optional<bool> show_progress = std::nullopt);

  // Data parallelism: this process's rank and the group's size (0 and 1 without a group).
  int32_t data_parallel_rank() const;
  int32_t data_parallel_size() const;
  // Called by every rank once its own work is done: with expert parallelism, serves the other
  // ranks' forwards (their tokens still need this rank's experts) until every rank has called it.
  // Errors when the group broke (a rank exited or stopped answering).
  Result<void> wait_for_group();
  // With expert parallelism: asks for an EPLB re-placement of the experts by their recorded load
  // at the start of the group's next forward round (every rank switches there; outputs do not
  // change). False, doing nothing, without expert parallelism. Thread-safe.
  bool request_expert_rebalance();
  // Every rank's bytes in rank order (small results to collect on one rank); {bytes} without a group.
  Result<std::vector<std::string>> all_gather(const std::string& bytes);

  // Token ids of a text prompt (the tokenizer's BOS rules applied); an error without tokenizer.
  Result<std::vector<int32_t>> tokenize(const std::string& text) const;
  bool has_tokenizer() const;
  int64_t vocab_size() const;

 private:
  struct Impl;
  explicit LLM(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace deepinfer
