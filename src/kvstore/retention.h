// Retention for one store tier: a sliding TTL per traffic class (refreshed on every hit) and a
// capacity bound with frequency- and depth-aware eviction. New pages enter a small probation
// segment and move to the protected segment on their first hit, so a burst of one-off pages
// evicts other one-off pages, not the hot shared prefixes; a page is never the victim of its own
// admission. Not thread-safe: each tier calls it under its own lock.
#pragma once

#include <cstdint>
#include <functional>
#include <list>
#include <optional>
#include <set>
#include <unordered_map>
#include <vector>

#include "kvcache/prefix_hash.h"
#include "kvstore/page_format.h"

namespace deepinfer {

// Seconds since the Unix epoch; tests inject a fake one.
using UnixClock = std::function<int64_t()>;
UnixClock system_unix_clock();

struct RetentionConfig {
  int64_t default_ttl_s = 72 * 3600;
  int64_t chat_ttl_s = 7 * 24 * 3600;
  int64_t agent_ttl_s = 3 * 24 * 3600;
  // Share of a tier's bytes that new, not yet re-used pages may hold.
  double probation_fraction = 0.2;
  UnixClock clock;  // empty: system_unix_clock()

  int64_t ttl_s(TrafficClass traffic_class) const;
  int64_t now() const;
};

struct PageEntryInfo {
  int64_t bytes = 0;
  int32_t depth = 0;  // page index in its chain: 0 is the first page of a prompt
  TrafficClass traffic_class = TrafficClass::kDefault;
};

class RetentionPolicy {
 public:
  RetentionPolicy(const RetentionConfig& config, int64_t capacity_bytes);

  // Records a new page last used at last_use_s and returns the pages to evict so that it fits
  // (never the new page itself). nullopt when the page alone exceeds the capacity (not admitted).
  // A page already present and not expired is only touched.
  std::optional<std::vector<BlockHash>> admit(const BlockHash& hash, const PageEntryInfo& info, int64_t last_use_s);
  // A hit: refreshes the TTL and counts a use. False (and the page forgotten) when it had expired.
  bool touch(const BlockHash& hash, int64_t now_s);
  bool contains(const BlockHash& hash) const { return entries_.contains(hash); }
  void remove(const BlockHash& hash);
  // Pages whose TTL ran out at now_s; they are forgotten.
  std::vector<BlockHash> take_expired(int64_t now_s);

  int64_t used_bytes() const { return probation_bytes_ + protected_bytes_; }
  int64_t capacity_bytes() const { return capacity_bytes_; }
  size_t num_pages() const { return entries_.size(); }

 private:
  // Protected pages in eviction order: fewest uses, then deepest, then least recently used.
  struct ProtectedKey {
    uint32_t uses;
    int32_t neg_depth;
    int64_t last_use_s;
    BlockHash hash;
    auto operator<=>(const ProtectedKey&) const = default;
  };
  struct Entry {
    PageEntryInfo info;
    int64_t last_use_s = 0;
    uint32_t uses = 0;
    bool is_protected = false;
    std::list<BlockHash>::iterator probation_pos;
  };
  ProtectedKey key_of(const BlockHash& hash, const Entry& entry) const;
  bool is_expired(const Entry& entry, int64_t now_s) const;
  std::optional<BlockHash> pick_victim(const BlockHash& keep) const;

  RetentionConfig config_;
  int64_t capacity_bytes_;
  std::unordered_map<BlockHash, Entry, BlockHashHasher> entries_;
  std::list<BlockHash> probation_;  // oldest first
  std::set<ProtectedKey> protected_;
  int64_t probation_bytes_ = 0;
  int64_t protected_bytes_ = 0;
};

}  // namespace deepinfer
