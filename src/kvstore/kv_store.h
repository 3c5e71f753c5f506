// KvStore: the persistent KV page store behind the engine's device cache. Tiers are tried in
// order host memory -> local disk -> shared backend (Redis); a page found lower down is promoted
// to host memory. Writes go through a background writer thread with a bounded queue and are
// dropped (and counted) when it is full, so the engine never waits on storage. Loads run on a
// background loader thread and stop at the first page that is missing, fails verification, or
// would cost more to load than to recompute. Thread-safe.
#pragma once

#include <cstdint>
#include <future>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/result.h"
#include "kvstore/model_identity.h"
#include "kvstore/store_tier.h"
#include "runtime/host_slab_pool.h"

namespace deepinfer {

struct KvStoreConfig {
  std::string dir;                                 // local disk tier; empty: none
  int64_t host_bytes = int64_t{1} << 30;           // host-memory tier; 0: none
  int64_t disk_bytes = int64_t{64} << 30;
  std::string backend = "disk";                    // "disk", or "redis://host:port" for a shared tier too
  // Weights and tokenizer identity (fingerprint_model_dir); joins the prefix-hash chain's seed.
  std::string model_identity;
  // The backend's batch-invariant mode (BackendOptions::batch_invariant): its KV differs from the
  // default mode's in the last bits, so the seed names it and neither mode loads the other's pages.
  bool batch_invariant = false;
  int32_t write_queue_pages = 1024;
  int64_t write_queue_bytes = int64_t{256} << 20;
  bool cost_guard = true;  // load a page only when that is cheaper than recomputing it
  // Sliding-window models: prefix tokens whose sliding-window layers' KV a hit rebuilds by a
  // replay (docs/kvstore.md). 0: max(128, window); -1: exact (sliding layers x window); else N.
  int32_t swa_replay_tokens = 0;
  // The KV cache's element type: pages hold the cache's own bytes (CausalLM::read_full_kv_blocks)
  // and each records it; a page of another type is never loaded (the fingerprint differs too).
  DType kv_dtype = DType::kF32;
  // Threads that check page bodies (XXH3-128, ~5 GB/s each) for loads that verify beside the
  // upload; they work only while pages load. 0: half the cores, 1 to 8.
  int32_t verify_threads = 0;
  RetentionConfig retention;
  // Page images go into its slabs (Backend::make_pinned_pool: pinned memory on CUDA, so loads
  // DMA straight to the device); when it is full they use ordinary memory (counted). Null:
  // ordinary memory. Every page image dies with the store, so the pool outlives them.
  std::shared_ptr<HostSlabPool> host_pool;

  bool enabled() const { return !dir.empty() || backend.starts_with("redis://"); }
};

struct PageWrite {
  BlockHash hash{};
  int32_t page_index = 0;
  std::vector<int32_t> token_ids;
  std::vector<uint8_t> payload;
  TrafficClass traffic_class = TrafficClass::kDefault;
  // Instead of payload: an image from KvStore::stage_page whose payload region already holds
  // the KV (a device copied it there); the writer seals it in place.
  std::shared_ptr<PageBuffer> staged;
  size_t bytes() const { return staged ? staged->size() : payload.size(); }
};

struct PageRequest {
  BlockHash hash{};
  int32_t page_index = 0;
  std::vector<int32_t> token_ids;
};

struct LoadedPage {
  SharedPage image;                 // keeps payload alive
  std::span<const uint8_t> payload;
  int32_t tier = 0;                 // index into KvStoreStats::tiers
  // Loads with BodyCheck::kBeside: true once the body checksum matched, false when it did not (the
  // page is then dropped from its tier and counted). The payload may be copied before, but the
  // copy must not be used until this is true. Not valid (already checked) for kBefore loads.
  std::shared_future<bool> body_ok;
  // Whether the payload may be used: waits for the body check of a kBeside load.
  bool verified() const { return !body_ok.valid() || body_ok.get(); }
};

// When a load checks each page's body (the XXH3-128 pass over every byte; the header, identity
// and token ids are always checked first): kBefore, on the loading thread before the page is
// returned; kBeside, on the store's verify threads, started as each page is found, so the caller
// can upload the payload while it runs and must wait for LoadedPage::body_ok before using it.
enum class BodyCheck { kBefore, kBeside };

struct KvStoreStats {
  std::vector<TierStats> tiers;     // in lookup order
  int64_t pages_queued = 0;         // accepted by the writer queue
  int64_t queue_drops = 0;          // refused because the queue was full
  int64_t pages_loaded = 0;         // verified pages handed to the engine
  int64_t loads_skipped_by_cost = 0;  // pages left to recompute because loading was slower
  int64_t tokens_replayed = 0;      // sliding-window models: tokens run again on hits (SWA replay)
  int64_t host_pool_pages = 0;      // page images placed in the host pool's (pinned) slabs
  int64_t host_pool_fallbacks = 0;  // page images in ordinary memory because the pool was full
};

class KvStore {
 public:
  // fingerprint: the engine's chain seed (model, dtype, KV layout, code version, identity);
  // page images carry its hash. Errors: a malformed backend URL.
  static Result<std::unique_ptr<KvStore>> open(const KvStoreConfig& config, std::string_view fingerprint);
  ~KvStore();

  // Queues a page for every tier without blocking; false (counted) when the queue is full.
  bool enqueue_write(PageWrite write);
  // A page image buffer from the store's allocator (a pinned slab when there is a host pool) for
  // PageWrite::staged; fill page_payload_region(*image, num_tokens) before enqueue_write.
  std::shared_ptr<PageBuffer> stage_page(int32_t num_tokens, int64_t payload_bytes);
  // Loads the longest run of pages from the front of pages; each payload is verified against
  // its request (hash, index, tokens, checksum) and must be payload_bytes long. With the cost
  // guard on, a page is taken from a tier only if tier cost < recompute_seconds_per_page.
  // With BodyCheck::kBeside a page whose body fails is still in the result: the caller stops
  // at the first page whose body_ok is false.
  std::vector<LoadedPage> load_chain(const std::vector<PageRequest>& pages, int64_t payload_bytes,
                                     double recompute_seconds_per_page, BodyCheck check = BodyCheck::kBefore);
  // load_chain on the loader thread.
  std::future<std::vector<LoadedPage>> load_chain_async(std::vector<PageRequest> pages, int64_t payload_bytes,
                                                        double recompute_seconds_per_page,
                                                        BodyCheck check = BodyCheck::kBefore);
  // Whether host memory or the local disk holds the page (no network).
  bool contains_local(const BlockHash& hash);
  // Blocks until every queued write is done (tests, shutdown, benchmarks).
  void flush();
  // Blocks until no page of `hashes` is queued or being written: each is in the tiers (or was
  // dropped), whatever else the queue holds. Pages queued after the call that have one of these
  // hashes are waited for too.
  void wait_written(std::span<const BlockHash> hashes);
  // Drops TTL-expired pages now (the writer also does it every few seconds).
  void expire();

  KvStoreStats stats() const;
  const std::vector<TierCost>& tier_costs() const;
  // Replaces the host tier's measured cost (its memcpy probe) with one the caller timed on the
  // real load path (the engine: a page upload into the device cache). Call before any load.
  void set_host_load_cost(const TierCost& cost);
  uint64_t layout_id() const;

 private:
  struct Impl;
  explicit KvStore(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace deepinfer
