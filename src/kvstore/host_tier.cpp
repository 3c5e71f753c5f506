// Host-memory tier: a hash map of shared page images under one lock.
#include "kvstore/host_tier.h"

#include <chrono>
#include <cstring>
#include <vector>

namespace deepinfer {

HostTier::HostTier(int64_t capacity_bytes, const RetentionConfig& retention)
    : retention_(retention), policy_(retention, capacity_bytes) {}

bool HostTier::contains(const BlockHash& hash) {
  std::lock_guard lock(mutex_);
  return pages_.contains(hash);
}

std::optional<SharedPage> HostTier::get(const BlockHash& hash) {
  std::lock_guard lock(mutex_);
  const auto it = pages_.find(hash);
  if (it == pages_.end() || !policy_.touch(hash, retention_.now())) {
    if (it != pages_.end()) {
      pages_.erase(it);
      counters_.expirations++;
    }
    counters_.misses++;
    return std::nullopt;
  }
  counters_.hits++;
  counters_.bytes_read += static_cast<int64_t>(it->second->size());
  return it->second;
}

bool HostTier::put(const BlockHash& hash, const PageEntryInfo& info, const SharedPage& image) {
  std::lock_guard lock(mutex_);
  const std::optional<std::vector<BlockHash>> victims = policy_.admit(hash, info, retention_.now());
  if (!victims) return false;
  for (const BlockHash& victim : *victims) {
    pages_.erase(victim);
    counters_.evictions++;
  }
  // insert_or_assign: an expired copy may still be in the map (admit then re-admits it as new).
  if (pages_.insert_or_assign(hash, image).second) {
    counters_.pages_written++;
    counters_.bytes_written += static_cast<int64_t>(image->size());
  }
  return true;
}

void HostTier::drop_corrupt(const BlockHash& hash) {
  std::lock_guard lock(mutex_);
  counters_.checksum_failures++;
  policy_.remove(hash);
  pages_.erase(hash);
}

void HostTier::expire() {
  std::lock_guard lock(mutex_);
  for (const BlockHash& hash : policy_.take_expired(retention_.now())) {
    pages_.erase(hash);
    counters_.expirations++;
  }
}

TierStats HostTier::stats() const {
  std::lock_guard lock(mutex_);
  TierStats s = counters_.snapshot(name());
  s.num_pages = static_cast<int64_t>(pages_.size());
  s.used_bytes = policy_.used_bytes();
  return s;
}

TierCost HostTier::measure_cost(int64_t probe_bytes) {
  // A page hit in host memory costs one copy into the model's cache: measure memcpy.
  std::vector<uint8_t> src(static_cast<size_t>(probe_bytes), 1), dst(static_cast<size_t>(probe_bytes));
  std::memcpy(dst.data(), src.data(), src.size());  // fault the pages in first
  const auto start = std::chrono::steady_clock::now();
  constexpr int kRepeats = 4;
  for (int i = 0; i < kRepeats; ++i) std::memcpy(dst.data(), src.data(), src.size());
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  TierCost cost;
  cost.bytes_per_s = static_cast<double>(probe_bytes) * kRepeats / std::max(seconds, 1e-9);
  cost.seconds_per_page = 1e-6;  // a hash-map lookup under a lock
  cost.probe = "memcpy";
  return cost;
}

}  // namespace deepinfer
