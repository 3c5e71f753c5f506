// The tiered store: writer and loader threads over the tiers, verification on every load; the
// tiers' shared counters and rate-limited warnings.
#include "kvstore/kv_store.h"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <thread>
#include <unordered_set>
#include <vector>

#include "core/logging.h"
#include "kvcache/prefix_hash.h"
#include "kvstore/disk_tier.h"
#include "kvstore/host_tier.h"
#include "kvstore/redis_tier.h"
#include "kvstore/slab_allocator.h"

namespace deepinfer {
namespace {

// Probe size for the start-up bandwidth measurement: large enough to amortise call overheads.
constexpr int64_t kProbeBytes = int64_t{4} << 20;
constexpr auto kExpirePeriod = std::chrono::seconds(10);

}  // namespace

struct KvStore::Impl {
  KvStoreConfig config;
  uint64_t layout_id = 0;
  // Declared before the tiers: every page image they hold goes back to it.
  std::unique_ptr<SlabHostAllocator> slab_allocator;
  HostAllocator* allocator = &default_host_allocator();
  std::vector<std::unique_ptr<StoreTier>> tiers;
  std::vector<TierCost> costs;

  std::mutex mutex;
  std::condition_variable wake_writer, page_written, wake_loader;
  std::deque<PageWrite> writes;
  int64_t queued_bytes = 0;
  std::optional<BlockHash> writing;  // the page the writer has taken off the queue and not finished
  std::deque<std::packaged_task<std::vector<LoadedPage>()>> loads;
  std::condition_variable wake_verifier;
  std::deque<std::packaged_task<bool()>> body_checks;
  bool stopping = false;
  bool loader_gone = false;  // set once the loader joined: no body check can be queued after it
  std::thread writer, loader;
  std::vector<std::thread> verifiers;

  std::atomic<int64_t> pages_queued{0}, queue_drops{0}, pages_loaded{0}, loads_skipped_by_cost{0};

  void write_page(const PageWrite& w) {
    PageContent content;
    content.identity = PageIdentity{w.hash, layout_id, w.page_index, w.token_ids, config.kv_dtype};
    content.traffic_class = w.traffic_class;
    content.created_unix_s = config.retention.now();
    content.payload = w.payload;
    const SharedPage image = w.staged ? seal_page(w.staged, content) : encode_page(content, *allocator);
    PageEntryInfo info;
    info.bytes = static_cast<int64_t>(image->size());
    info.depth = w.page_index;
    info.traffic_class = w.traffic_class;
    for (const auto& tier : tiers) tier->put(w.hash, info, image);
  }

  void writer_loop() {
    auto next_expire = std::chrono::steady_clock::now() + kExpirePeriod;
    std::unique_lock lock(mutex);
    while (true) {
      wake_writer.wait_until(lock, next_expire, [&] { return stopping || !writes.empty(); });
      if (std::chrono::steady_clock::now() >= next_expire) {
        lock.unlock();
        for (const auto& tier : tiers) tier->expire();
        lock.lock();
        next_expire = std::chrono::steady_clock::now() + kExpirePeriod;
      }
      if (writes.empty()) {
        if (stopping) return;
        continue;
      }
      PageWrite w = std::move(writes.front());
      writes.pop_front();
      queued_bytes -= static_cast<int64_t>(w.bytes());
      writing = w.hash;
      lock.unlock();
      write_page(w);
      lock.lock();
      writing.reset();
      page_written.notify_all();
    }
  }

  // Runs queue's tasks (unlocked) until it is empty once done is set: the loader's loads, and the
  // verifiers' body checks (finished on stop, so every LoadedPage::body_ok gets its value).
  template <typename Task>
  void drain(std::deque<Task>& queue, std::condition_variable& wake, const bool& done) {
    std::unique_lock lock(mutex);
    while (true) {
      wake.wait(lock, [&] { return done || !queue.empty(); });
      if (queue.empty()) return;
      auto task = std::move(queue.front());
      queue.pop_front();
      lock.unlock();
      task();
      lock.lock();
    }
  }

  void promote(const BlockHash& hash, int32_t depth, int64_t image_bytes, const SharedPage& image) {
    PageEntryInfo info;
    info.bytes = image_bytes;
    info.depth = depth;
    tiers[0]->put(hash, info, image);
  }

  // The body check of a page found in tier t, queued for the verify threads: a page that fails
  // is dropped there; one that passes is promoted to host memory (only then: a lower tier's
  // corrupt copy never enters it).
  std::shared_future<bool> check_body_beside(const PageRequest& request, int64_t image_bytes, SharedPage image,
                                             size_t t) {
    std::packaged_task<bool()> task([this, hash = request.hash, depth = request.page_index, image_bytes,
                                     image = std::move(image), t] {
      if (!verify_page_body(image->bytes()).ok()) {
        tiers[t]->drop_corrupt(hash);
        return false;
      }
      if (t > 0) promote(hash, depth, image_bytes, image);
      pages_loaded++;
      return true;
    });
    std::shared_future<bool> ok = task.get_future().share();
    {
      std::lock_guard lock(mutex);
      body_checks.push_back(std::move(task));
    }
    wake_verifier.notify_one();
    return ok;
  }

  // One page from the first tier that holds a verified copy (with kBeside: a copy whose identity
  // matched, its body check queued); nullopt on a miss, or when the cost guard says recomputing
  // is cheaper than the next tier.
  std::optional<LoadedPage> load_page(const PageRequest& request, int64_t payload_bytes, double recompute_seconds,
                                      BodyCheck check) {
    const PageIdentity expected{request.hash, layout_id, request.page_index, request.token_ids, config.kv_dtype};
    const auto image_bytes = static_cast<int64_t>(
        page_image_bytes(static_cast<int32_t>(request.token_ids.size()), static_cast<size_t>(payload_bytes)));
    for (size_t t = 0; t < tiers.size(); ++t) {
      if (config.cost_guard && costs[t].seconds_for(image_bytes) >= recompute_seconds) {
        loads_skipped_by_cost++;
        return std::nullopt;
      }
      const std::optional<SharedPage> image = tiers[t]->get(request.hash);
      if (!image) continue;
      auto payload = check == BodyCheck::kBefore ? verify_page((*image)->bytes(), expected)
                                                 : verify_page_identity((*image)->bytes(), expected);
      if (!payload.ok() || static_cast<int64_t>(payload->size()) != payload_bytes) {
        tiers[t]->drop_corrupt(request.hash);
        continue;  // a lower tier may hold a good copy
      }
      if (check == BodyCheck::kBeside) {
        std::shared_future<bool> ok = check_body_beside(request, image_bytes, *image, t);
        return LoadedPage{*image, *payload, static_cast<int32_t>(t), std::move(ok)};
      }
      if (t > 0) promote(request.hash, request.page_index, image_bytes, *image);  // the next hit is a host hit
      return LoadedPage{*image, *payload, static_cast<int32_t>(t), {}};
    }
    return std::nullopt;
  }
};

KvStore::KvStore(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Result<std::unique_ptr<KvStore>> KvStore::open(const KvStoreConfig& config, std::string_view fingerprint) {
  if (config.host_bytes < 0 || config.disk_bytes < 0) return Error{"kv-cache host and disk bytes must be >= 0"};
  if (config.write_queue_pages < 1) return Error{"the kv store's write queue needs room for at least one page"};
  auto impl = std::make_unique<Impl>();
  impl->config = config;
  impl->layout_id = layout_id_of(fingerprint);
  if (config.host_pool) {
    impl->slab_allocator = std::make_unique<SlabHostAllocator>(config.host_pool);
    impl->allocator = impl->slab_allocator.get();
  }
  if (config.host_bytes > 0) impl->tiers.push_back(std::make_unique<HostTier>(config.host_bytes, config.retention));
  if (!config.dir.empty()) {
    impl->tiers.push_back(std::make_unique<DiskTier>(config.dir, config.disk_bytes, config.retention, *impl->allocator));
  }
  if (config.backend.starts_with("redis://")) {
    auto address = parse_redis_url(config.backend);
    if (!address.ok()) return Error{"--kv-cache-backend: " + address.error().message};
    impl->tiers.push_back(std::make_unique<RedisTier>(*address, config.retention, *impl->allocator));
  } else if (config.backend != "disk") {
    return Error{"--kv-cache-backend '" + config.backend + "': expected disk or redis://host:port"};
  }
  for (const auto& tier : impl->tiers) impl->costs.push_back(tier->measure_cost(kProbeBytes));
  Impl* raw = impl.get();
  impl->writer = std::thread([raw] { raw->writer_loop(); });
  impl->loader = std::thread([raw] { raw->drain(raw->loads, raw->wake_loader, raw->stopping); });
  const int32_t verifiers = config.verify_threads > 0
                                ? config.verify_threads
                                : std::clamp(static_cast<int32_t>(std::thread::hardware_concurrency() / 2), 1, 8);
  for (int32_t i = 0; i < verifiers; ++i) {
    impl->verifiers.emplace_back([raw] { raw->drain(raw->body_checks, raw->wake_verifier, raw->loader_gone); });
  }
  return std::unique_ptr<KvStore>(new KvStore(std::move(impl)));
}

KvStore::~KvStore() {
  {
    std::lock_guard lock(impl_->mutex);
    impl_->stopping = true;
  }
  impl_->wake_writer.notify_all();
  impl_->wake_loader.notify_all();
  impl_->writer.join();
  impl_->loader.join();
  // After the loader: the checks it queued run before the verifiers see the queue empty.
  {
    std::lock_guard lock(impl_->mutex);
    impl_->loader_gone = true;
  }
  impl_->wake_verifier.notify_all();
  for (std::thread& verifier : impl_->verifiers) verifier.join();
}

bool KvStore::enqueue_write(PageWrite write) {
  Impl& m = *impl_;
  {
    std::lock_guard lock(m.mutex);
    const auto bytes = static_cast<int64_t>(write.bytes());
    if (static_cast<int32_t>(m.writes.size()) >= m.config.write_queue_pages ||
        (!m.writes.empty() && m.queued_bytes + bytes > m.config.write_queue_bytes)) {
      m.queue_drops++;
      return false;
    }
    m.queued_bytes += bytes;
    m.writes.push_back(std::move(write));
  }
  m.pages_queued++;
  m.wake_writer.notify_one();
  return true;
}

std::shared_ptr<PageBuffer> KvStore::stage_page(int32_t num_tokens, int64_t payload_bytes) {
  return allocate_page(num_tokens, static_cast<size_t>(payload_bytes), *impl_->allocator);
}

std::vector<LoadedPage> KvStore::load_chain(const std::vector<PageRequest>& pages, int64_t payload_bytes,
                                            double recompute_seconds_per_page, BodyCheck check) {
  std::vector<LoadedPage> loaded;
  for (const PageRequest& page : pages) {
    std::optional<LoadedPage> hit = impl_->load_page(page, payload_bytes, recompute_seconds_per_page, check);
    if (!hit) break;
    loaded.push_back(std::move(*hit));
  }
  // kBeside pages count when their body check passes.
  if (check == BodyCheck::kBefore) impl_->pages_loaded += static_cast<int64_t>(loaded.size());
  return loaded;
}

std::future<std::vector<LoadedPage>> KvStore::load_chain_async(std::vector<PageRequest> pages, int64_t payload_bytes,
                                                               double recompute_seconds_per_page, BodyCheck check) {
  std::packaged_task<std::vector<LoadedPage>()> task(
      [this, pages = std::move(pages), payload_bytes, recompute_seconds_per_page, check] {
        return load_chain(pages, payload_bytes, recompute_seconds_per_page, check);
      });
  std::future<std::vector<LoadedPage>> result = task.get_future();
  {
    std::lock_guard lock(impl_->mutex);
    impl_->loads.push_back(std::move(task));
  }
  impl_->wake_loader.notify_one();
  return result;
}

bool KvStore::contains_local(const BlockHash& hash) {
  for (const auto& tier : impl_->tiers) {
    if (tier->name() != "redis" && tier->contains(hash)) return true;
  }
  return false;
}

void KvStore::flush() {
  std::unique_lock lock(impl_->mutex);
  impl_->page_written.wait(lock, [&] { return impl_->writes.empty() && !impl_->writing; });
}

void KvStore::wait_written(std::span<const BlockHash> hashes) {
  const std::unordered_set<BlockHash, BlockHashHasher> waited(hashes.begin(), hashes.end());
  std::unique_lock lock(impl_->mutex);
  impl_->page_written.wait(lock, [&] {
    if (impl_->writing && waited.contains(*impl_->writing)) return false;
    return std::none_of(impl_->writes.begin(), impl_->writes.end(),
                        [&](const PageWrite& write) { return waited.contains(write.hash); });
  });
}

void KvStore::expire() {
  for (const auto& tier : impl_->tiers) tier->expire();
}

KvStoreStats KvStore::stats() const {
  KvStoreStats s;
  for (const auto& tier : impl_->tiers) s.tiers.push_back(tier->stats());
  s.pages_queued = impl_->pages_queued.load();
  s.queue_drops = impl_->queue_drops.load();
  s.pages_loaded = impl_->pages_loaded.load();
  s.loads_skipped_by_cost = impl_->loads_skipped_by_cost.load();
  if (impl_->slab_allocator) {
    s.host_pool_pages = impl_->slab_allocator->slab_allocations();
    s.host_pool_fallbacks = impl_->slab_allocator->fallbacks();
  }
  return s;
}

const std::vector<TierCost>& KvStore::tier_costs() const { return impl_->costs; }

void KvStore::set_host_load_cost(const TierCost& cost) {
  // The loader reads costs unlocked: only before the first load, when no loader task exists yet.
  if (impl_->config.host_bytes > 0) impl_->costs.front() = cost;
}

uint64_t KvStore::layout_id() const { return impl_->layout_id; }

TierStats TierCounters::snapshot(std::string_view name) const {
  TierStats s;
  s.name = std::string(name);
  s.hits = hits.load();
  s.misses = misses.load();
  s.bytes_read = bytes_read.load();
  s.bytes_written = bytes_written.load();
  s.pages_written = pages_written.load();
  s.evictions = evictions.load();
  s.expirations = expirations.load();
  s.checksum_failures = checksum_failures.load();
  s.errors = errors.load();
  return s;
}

void warn_rate_limited(std::string_view key, const std::string& message) {
  static std::mutex mutex;
  static std::map<std::string, std::chrono::steady_clock::time_point, std::less<>> last_warned;
  const auto now = std::chrono::steady_clock::now();
  {
    std::lock_guard lock(mutex);
    const auto it = last_warned.find(key);
    if (it != last_warned.end() && now - it->second < std::chrono::minutes(1)) return;
    last_warned[std::string(key)] = now;
  }
  DI_LOG(kWarn, "kv store: " << message);
}

}  // namespace deepinfer
