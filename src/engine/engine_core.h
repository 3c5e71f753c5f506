// EngineCore: the step loop. Each step() schedules sequences (scheduler.h), runs one forward
// pass over all of them (prefill chunks and decodes mixed), samples the sequences whose last
// token ran, and turns tokens into text (streaming detokenizer, stop strings). Engine modes:
// NORMAL; PROMPT (prefill only: a request ends after its first token and its KV is handed back
// as a PrefilledRequest); COMPLETION (decode: takes PrefilledRequests, and runs a whole request
// given to it, prefill included, as NORMAL does: a cluster's n > 1 requests).
// Not thread-safe: one thread drives it.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "engine/prefill_kv_export.h"
#include "engine/prompt_images.h"
#include "engine/request.h"
#include "engine/scheduler.h"
#include "engine/speculator.h"
#include "grammar/compiler.h"
#include "kvcache/kv_cache_manager.h"
#include "kvstore/kv_store.h"
#include "model/model.h"
#include "sampling/logprobs.h"
#include "tokenizer/tokenizer.h"

namespace deepinfer {

enum class EngineMode : uint8_t { kNormal, kPrompt, kCompletion };

struct EngineConfig {
  int32_t block_size = 128;      // tokens per KV page (the seeds' page size)
  int32_t num_kv_blocks = 0;     // 0: kv_cache_bytes / the model's bytes per block
  // The KV cache's bytes; 0: 1 GiB on a host backend, on a device what gpu_memory_utilization
  // leaves after a dry run of the heaviest step (engine/memory_plan.h).
  int64_t kv_cache_bytes = 0;
  double gpu_memory_utilization = 0.9;  // of the device's memory, for everything the engine holds
  int32_t max_model_len = 0;     // 0: the model's max_position_embeddings
  bool enable_prefix_caching = true;
  SchedulerConfig scheduler;
  EngineMode mode = EngineMode::kNormal;
  // Persistent KV store below the device cache (host memory, disk, Redis); off unless it names
  // a directory or a Redis backend (engine/kv_offload.h).
  KvStoreConfig kv_store;
  // Draw tokens where the logits are (CausalLM::forward_sampled): from a device only the token ids
  // leave it, plus the rows the host still needs (logprobs, penalties, logit bias, min_tokens,
  // grammar masks, n > 1 forks). false: every row is copied and sampled on the host
  // (--host-sampling). The tokens are the same either way.
  bool device_sampling = true;
  // Pipelined steps (docs/architecture.md, "The pipelined step loop"): the model runs on its own
  // thread; while it runs a step, the engine schedules and launches the next one as if the
  // running one were done (each sequence's next input token taken from its draws), then
  // post-processes it. Not after a step with rows sampled on the host, nor with the persistent
  // store, split sliding-window tables or PROMPT / COMPLETION mode; a sequence that finished
  // meanwhile has its extra token dropped, never streamed.
  bool async_scheduling = false;
  // Speculative decoding with the model's draft module (engine/speculator.h); num_tokens 0: off.
  // A step that verifies drafts or drafts after itself runs one at a time (a step's drafts come
  // from the results of the one before it); with async_scheduling, steps the varlen budget does
  // not draft for pipeline (Speculator::may_pipeline).
  SpeculativeConfig speculative;
  // The outputs must repeat bit for bit (batch-invariant kernels, fixed seeds): speculative
  // decoding then needs speculative.varlen off, whose batches do not depend on timing.
  bool deterministic = false;
  // The structured-output grammar compiler: threads, cache, each compile's timeout and budget.
  grammar::GrammarCompilerService::Options grammar_compiler;
};

// One sample's progress in one step.
struct SampleOutput {
  int32_t index = 0;  // the sample index (0..n-1)
  std::vector<int32_t> new_token_ids;
  std::string new_text;  // empty without a tokenizer
  std::vector<TokenLogprob> new_logprobs;  // when params.logprobs is set
  bool finished = false;
  FinishReason finish_reason = FinishReason::kNone;
  std::string stop_reason;  // the matched stop string, or the stop token id as text
  // Speculative decoding, over the sample's life so far: drafts verified and accepted.
  int32_t num_draft_tokens = 0;
  int32_t num_accepted_draft_tokens = 0;
};

struct RequestOutput {
  int64_t request_id = 0;
  std::vector<SampleOutput> samples;  // the samples that changed this step
  // Once, in the step where the prompt finished: prompt_logprobs[i] scores prompt token i
  // (nullopt for token 0).
  std::optional<std::vector<std::optional<TokenLogprob>>> prompt_logprobs;
  int32_t num_prompt_tokens = 0;
  int32_t num_cached_tokens = 0;
  bool finished = false;  // every sample finished
  // The request's own fault, found before it produced a token (its structured-output grammar
  // did not compile: an error in the spec, a timeout): the server answers 400. finished is then
  // true, every sample kAbort.
  std::optional<Error> error;
  // The engine's fault: a step failed while running this request (EngineCore::step), the
  // server answers 500. The request is finished (its samples end with kAbort) and its KV freed.
  std::optional<Error> failure;
};

// PROMPT mode: how a request's KV leaves the engine once its prefill is done.
enum class PrefillHandover : uint8_t {
  kCopyKv,        // copied into the PrefilledRequest (PrefilledRequest::kv), e.g. for a push
  kThroughStore,  // only as the persistent store's pages: none copied (needs a persistent store)
  kStream,        // layer by layer while the prefill runs, to the request's PrefillKvSink: none copied
};

// A request whose prompt a PROMPT engine ran: its first token and its KV blocks' contents.
struct PrefilledRequest {
  int64_t request_id = 0;
  std::vector<int32_t> prompt_token_ids;
  SamplingParams params;
  int32_t first_token = 0;
  int32_t block_size = 0;
  // The prompt's KV (engine/kv_handover.h) in the cache's element type, the same whether or not
  // either engine splits its cache. The layers without a sliding window, every block:
  // [blocks_for_tokens(prompt), model.handover_kv_bytes_per_block(KvLayers::kFull)] bytes.
  // Empty when it was handed over kThroughStore or kStream.
  std::vector<uint8_t> kv;
  // The sliding-window layers, only the blocks the next token's window reaches, from
  // swa_first_block on: [blocks - swa_first_block, handover_kv_bytes_per_block(kSliding)] bytes.
  int32_t swa_first_block = 0;
  std::vector<uint8_t> swa_kv;
  // kv and swa_kv are empty: the KV did not come with the request. Either the PROMPT engine
  // persisted the prompt's full pages in a shared KV store (a cluster's prefill worker, store
  // mode), or they never reached this engine (a push that failed, or a decode worker that died
  // before it ran the request). The engine loads what its prefix cache and store find of the
  // prompt and computes the rest and the first token again, as for a sequence preempted by
  // recompute, then samples the second token. A NORMAL engine takes these too.
  bool kv_not_carried = false;
  // The caller already streamed first_token (a cluster's prefill worker did): the COMPLETION
  // engine's outputs start after it.
  bool first_token_delivered = false;
  // PrefillHandover::kThroughStore: the prompt's pages the PROMPT engine queued for its persistent
  // store (KvStore::wait_written; EngineCore::wait_kv_written), kv_not_carried set.
  std::vector<BlockHash> queued_page_hashes;
};

struct EngineStats {
  size_t num_waiting = 0;
  size_t num_running = 0;
  double kv_usage = 0.0;
  int32_t num_kv_blocks = 0;  // the KV pool's blocks (of the full-attention layers when split)
  // Blocks of the sliding-window layers' own pool when the model mixes window and full layers
  // (docs/architecture.md); 0: not split.
  int32_t num_swa_kv_blocks = 0;
  PrefixCacheStats prefix_cache;
  int64_t num_preemptions = 0;
  std::optional<KvStoreStats> kv_store;  // per-tier counters when the store is on
  // Steps launched while the one before was still running (EngineConfig::async_scheduling).
  int64_t num_overlapped_steps = 0;
  // Images the engine ran through the model's image encoder (not those that came encoded, nor
  // repeats its encoder cache served).
  int64_t num_encoded_images = 0;
  std::optional<SpeculativeStats> speculative;  // when speculative decoding is on
};

class EngineCore {
 public:
  // tokenizer may be null (ids only; stop strings are then an error).
  EngineCore(CausalLM& model, const Tokenizer* tokenizer, const EngineConfig& config);
  ~EngineCore();

  // Errors: empty prompt, ids outside the vocabulary, prompt + max_tokens beyond max_model_len
  // or the KV pool, invalid sampling parameters, a duplicate request id. kv_sink: where a PROMPT
  // engine streams the prompt's KV (handover kStream, which needs it). images: a multimodal
  // model's images at their placeholders (engine/prompt_images.h; the step that first runs one
  // encodes it, unless the same pixels were encoded for a recent request).
  Result<void> add_request(int64_t request_id, std::vector<int32_t> prompt_token_ids, const SamplingParams& params,
                           int32_t priority = 0, std::string cache_salt = "",
                           TrafficClass kv_cache_class = TrafficClass::kDefault,
                           PrefillHandover handover = PrefillHandover::kCopyKv,
                           std::shared_ptr<PrefillKvSink> kv_sink = nullptr, std::vector<ImageInput> images = {});
  // Cancels at any point; frees everything; the next step() reports it finished (kAbort).
  void abort_request(int64_t request_id);
  // One scheduling step and its forward pass. An exception from the forward pass ends every
  // request of its batch, and one while processing a request's results ends that request: their
  // outputs come back finished with `failure` set, their KV freed, and the engine serves the rest.
  // A DeviceError with lost() propagates: the device can run nothing more. Any other exception
  // that propagates (from scheduling, or a persistent store's page import) leaves every request
  // in place; aborting them all brings the engine back to idle.
  std::vector<RequestOutput> step();
  bool has_unfinished_requests() const;
  // Expert parallelism (CausalLM::run_idle_step): joins one round of the group without a forward
  // of this engine's; num_group_rounds counts the rounds this engine's model took part in.
  bool run_idle_step();
  int64_t num_group_rounds() const;
  // Waits until the persistent KV store has written every queued page (no store: returns at once).
  // Thread-safe: may run while another thread is inside step(), so shutdown can save what was
  // queued even when a step is stuck.
  void flush_kv_store();
  // Thread-safe (the store only): blocks until none of these pages is queued for the persistent
  // store or being written (a PrefilledRequest's queued_page_hashes). Returns at once without one.
  void wait_kv_written(std::span<const BlockHash> hashes);

  // PROMPT mode: requests whose prefill finished since the last call.
  std::vector<PrefilledRequest> take_prefilled();
  // Continues a request from its prefilled KV (COMPLETION mode), or one whose KV is not carried
  // (kv_not_carried: COMPLETION or NORMAL mode). With params.n > 1 the PROMPT engine ran sample 0
  // alone: the request runs with all n samples, sample 0 taking the KV and computing only the
  // prompt's last token, whose logits the others fork from; sample 0 goes on from first_token.
  // cache_salt, kv_cache_class and images (the prompt's, as the PROMPT engine had them) as for
  // add_request.
  Result<void> add_prefilled_request(PrefilledRequest prefilled, int32_t priority = 0, std::string cache_salt = "",
                                     TrafficClass kv_cache_class = TrafficClass::kDefault,
                                     std::vector<ImageInput> images = {});

  EngineStats stats() const;
  const EngineConfig& config() const;
  // Asserts the KV bookkeeping is consistent (tests).
  void check_invariants() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace deepinfer
