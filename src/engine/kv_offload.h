// KvOffload: the engine's hook into the persistent KV store (kvstore/). A new request is held
// back while the pages of its prompt that miss the device cache are looked up and loaded on the
// store's loader thread; when the load is done, the pages are written into free device blocks
// and registered in the prefix index, so the scheduler admits the request with them as ordinary
// prefix-cache hits (they count in num_cached_tokens). A finishing sequence's computed full
// pages are queued for the store's writer. With a split cache (a sliding-window model) a page
// holds only the full-attention layers' KV, and a hit rebuilds the sliding layers' KV by a
// replay of the prefix's last tokens (engine/swa_replay.h) before the request is released.
// On a device backend the store's page images live in the backend's pinned slab pool, so loads
// and saves are direct DMAs (docs/kvstore.md); pages hold the cache's own element type. A page's
// upload runs beside its body checksum, and only pages that passed are committed. Lives on the
// engine thread; not thread-safe.
#pragma once

#include <cstdint>
#include <future>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "engine/request.h"
#include "kvcache/kv_cache_manager.h"
#include "kvstore/kv_store.h"
#include "model/model.h"

namespace deepinfer {

class KvOffload {
 public:
  // Opens the store and measures the model's prefill speed once (two forward passes of a few
  // pages over free blocks), which the store's cost guard weighs page loads against.
  // fingerprint: the prefix-hash chain's seed (KvCacheConfig::model_fingerprint).
  // max_step_tokens: the most tokens one replay forward pass runs (the scheduler's step budget).
  static Result<std::unique_ptr<KvOffload>> create(CausalLM& model, KvCacheManager& kv, const KvStoreConfig& config,
                                                   const std::string& fingerprint, int32_t block_size,
                                                   int32_t max_step_tokens);
  // Logs what the store served and stored (info level).
  ~KvOffload();

  // Takes a request that has not been scheduled yet and starts loading its missing prefix pages.
  void hold(Request* request);
  // Forgets a held request (aborted); its load, if running, is discarded.
  void release(const Request* request);
  // Held requests whose loads are done, their pages now in the device cache, in hold order.
  // wait: block until at least one is ready (the engine has nothing else to run); then a chain is
  // imported as soon as its pages are found, their uploads running beside the body checks, while
  // without wait only chains whose checks are done are, so a running batch never waits on them.
  std::vector<Request*> take_ready(bool wait);
  bool has_held() const { return !held_.empty(); }
  // Queues the sequence's computed full pages that the store lacks (never blocks). Returns the
  // hashes of the pages it queued (KvStore::wait_written waits for them).
  std::vector<BlockHash> persist(const Request& request, const std::vector<int32_t>& block_table);

  KvStoreStats stats() const;
  // What importing pages added to the prefix cache's own counters (the engine subtracts it).
  const PrefixCacheStats& import_stats() const { return import_stats_; }
  double prefill_tokens_per_s() const { return prefill_tokens_per_s_; }
  KvStore& store() { return *store_; }

 private:
  struct Held {
    Request* request = nullptr;
    int32_t first_page = 0;  // pages before it were already in the device cache
    std::optional<std::future<std::vector<LoadedPage>>> load;
    std::vector<LoadedPage> pages;  // once load is done (their body checks may still run)
  };
  KvOffload(CausalLM& model, KvCacheManager& kv, std::unique_ptr<KvStore> store, std::string fingerprint,
            int32_t block_size, int32_t replay_tokens, int32_t replay_chunk);
  void measure_prefill();
  // Times the host tier's real load path, a page upload into the cache (from a pinned slab on a
  // device backend), and hands it to the store's cost guard in place of its memcpy probe.
  void measure_host_load();
  // The backend's pinned slab pool for the store's page images; null on host backends.
  std::shared_ptr<HostSlabPool> make_host_pool(const KvStoreConfig& config) const;
  // Chain hashes of the first num_pages full pages of tokens.
  std::vector<BlockHash> page_hashes(std::span<const int32_t> tokens, int32_t num_pages,
                                     const std::string& cache_salt) const;
  void import_pages(const Request& request, int32_t first_page, const std::vector<LoadedPage>& pages);
  // Index of the first page in [from, to) whose body check failed (waiting for each), or to.
  static size_t verified_until(const std::vector<LoadedPage>& pages, size_t from, size_t to);

  CausalLM& model_;
  KvCacheManager& kv_;
  std::unique_ptr<KvStore> store_;
  std::string fingerprint_;
  int32_t block_size_;
  int64_t payload_bytes_;
  // Split cache: prefix tokens replayed per hit (a multiple of block_size), 0 without a split
  // cache; and the most tokens per replay pass (a multiple of block_size).
  int32_t replay_tokens_;
  int32_t replay_chunk_;
  int64_t tokens_replayed_ = 0;
  std::vector<float> replay_logits_;
  double prefill_tokens_per_s_ = 0.0;
  std::vector<Held> held_;
  int64_t next_import_seq_id_ = -1;  // engine sequences have ids >= 0
  PrefixCacheStats import_stats_;
};

}  // namespace deepinfer
