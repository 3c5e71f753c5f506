// StoreTier: one level of the persistent KV page store (host memory, local disk, Redis). Tiers
// hold page images keyed by the prefix-hash chain and never interpret them: KvStore verifies
// every image it reads. Every method is thread-safe (the store's writer and loader threads call
// them concurrently). A tier that fails (disk full, server down) answers misses and counts.
#pragma once

#include <atomic>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "kvstore/page_format.h"
#include "kvstore/retention.h"

namespace deepinfer {

// Counters one tier exports (EngineStats, /metrics).
struct TierStats {
  std::string name;
  int64_t hits = 0;
  int64_t misses = 0;
  int64_t bytes_read = 0;
  int64_t bytes_written = 0;
  int64_t pages_written = 0;
  int64_t evictions = 0;     // capacity
  int64_t expirations = 0;   // TTL
  int64_t checksum_failures = 0;
  int64_t errors = 0;        // I/O or connection failures (each one became a miss or a dropped write)
  int64_t num_pages = 0;
  int64_t used_bytes = 0;
};

// Measured once at start: what reading one page from the tier costs.
struct TierCost {
  double bytes_per_s = 0.0;
  double seconds_per_page = 0.0;  // fixed cost per page (open, round trip)
  std::string probe;              // what was timed (logged with the figures)
  double seconds_for(int64_t bytes) const {
    return seconds_per_page + (bytes_per_s > 0 ? static_cast<double>(bytes) / bytes_per_s : 0.0);
  }
};

class StoreTier {
 public:
  virtual ~StoreTier() = default;
  virtual std::string_view name() const = 0;
  // Whether the tier holds the page (may ask a server). Does not count a hit.
  virtual bool contains(const BlockHash& hash) = 0;
  // The stored image; refreshes its TTL and counts a hit or a miss.
  virtual std::optional<SharedPage> get(const BlockHash& hash) = 0;
  // Stores an image (idempotent: a page already present is only refreshed). False on failure.
  virtual bool put(const BlockHash& hash, const PageEntryInfo& info, const SharedPage& image) = 0;
  // Drops a page that failed verification (counted as a checksum failure).
  virtual void drop_corrupt(const BlockHash& hash) = 0;
  // Forgets pages whose TTL ran out.
  virtual void expire() = 0;
  virtual TierStats stats() const = 0;
  // Measures read bandwidth and per-page cost with a probe of probe_bytes.
  virtual TierCost measure_cost(int64_t probe_bytes) = 0;
};

// Atomic counters behind TierStats, shared by the tier implementations.
struct TierCounters {
  std::atomic<int64_t> hits{0}, misses{0}, bytes_read{0}, bytes_written{0}, pages_written{0}, evictions{0},
      expirations{0}, checksum_failures{0}, errors{0};
  TierStats snapshot(std::string_view name) const;
};

// Logs a warning at most once a minute per key, so an unavailable store does not flood the log.
void warn_rate_limited(std::string_view key, const std::string& message);

}  // namespace deepinfer
