// Sliding TTL and probation/protected eviction for one tier.
#include "kvstore/retention.h"

#include <chrono>

#include "core/check.h"

namespace deepinfer {

UnixClock system_unix_clock() {
  return [] {
    return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
  };
}

int64_t RetentionConfig::ttl_s(TrafficClass traffic_class) const {
  switch (traffic_class) {
    case TrafficClass::kChat: return chat_ttl_s;
    case TrafficClass::kAgent: return agent_ttl_s;
    case TrafficClass::kDefault: break;
  }
  return default_ttl_s;
}

int64_t RetentionConfig::now() const { return clock ? clock() : system_unix_clock()(); }

RetentionPolicy::RetentionPolicy(const RetentionConfig& config, int64_t capacity_bytes)
    : config_(config), capacity_bytes_(capacity_bytes) {
  DI_CHECK(capacity_bytes >= 0 && config.probation_fraction > 0.0 && config.probation_fraction <= 1.0);
}

RetentionPolicy::ProtectedKey RetentionPolicy::key_of(const BlockHash& hash, const Entry& entry) const {
  return ProtectedKey{entry.uses, -entry.info.depth, entry.last_use_s, hash};
}

bool RetentionPolicy::is_expired(const Entry& entry, int64_t now_s) const {
  return now_s - entry.last_use_s >= config_.ttl_s(entry.info.traffic_class);
}

std::optional<BlockHash> RetentionPolicy::pick_victim(const BlockHash& keep) const {
  const auto probation_share = static_cast<int64_t>(config_.probation_fraction * static_cast<double>(capacity_bytes_));
  const auto oldest_probation = [&]() -> std::optional<BlockHash> {
    for (const BlockHash& hash : probation_) {
      if (hash != keep) return hash;
    }
    return std::nullopt;
  };
  // Probation pays for itself first while it holds more than its share; otherwise the least
  // valuable protected page goes, and only when none is left another new page.
  if (probation_bytes_ > probation_share) {
    if (auto victim = oldest_probation()) return victim;
  }
  if (!protected_.empty()) return protected_.begin()->hash;
  return oldest_probation();
}

std::optional<std::vector<BlockHash>> RetentionPolicy::admit(const BlockHash& hash, const PageEntryInfo& info,
                                                            int64_t last_use_s) {
  if (const auto it = entries_.find(hash); it != entries_.end()) {
    if (touch(hash, std::max(last_use_s, it->second.last_use_s))) return std::vector<BlockHash>{};
    // It had expired (touch forgot it): the rewrite is admitted as a new page.
  }
  if (info.bytes > capacity_bytes_) return std::nullopt;
  Entry entry;
  entry.info = info;
  entry.last_use_s = last_use_s;
  probation_.push_back(hash);
  entry.probation_pos = std::prev(probation_.end());
  entries_.emplace(hash, entry);
  probation_bytes_ += info.bytes;
  std::vector<BlockHash> victims;
  while (used_bytes() > capacity_bytes_) {
    const std::optional<BlockHash> victim = pick_victim(hash);
    DI_CHECK(victim.has_value(), "over capacity with only the new page left");
    victims.push_back(*victim);
    remove(*victim);
  }
  return victims;
}

bool RetentionPolicy::touch(const BlockHash& hash, int64_t now_s) {
  const auto it = entries_.find(hash);
  if (it == entries_.end()) return false;
  Entry& entry = it->second;
  if (is_expired(entry, now_s)) {
    remove(hash);
    return false;
  }
  if (entry.is_protected) {
    protected_.erase(key_of(hash, entry));
  } else {
    probation_.erase(entry.probation_pos);
    probation_bytes_ -= entry.info.bytes;
    protected_bytes_ += entry.info.bytes;
    entry.is_protected = true;
  }
  entry.uses = entry.uses == UINT32_MAX ? entry.uses : entry.uses + 1;
  entry.last_use_s = std::max(entry.last_use_s, now_s);
  protected_.insert(key_of(hash, entry));
  return true;
}

void RetentionPolicy::remove(const BlockHash& hash) {
  const auto it = entries_.find(hash);
  if (it == entries_.end()) return;
  Entry& entry = it->second;
  if (entry.is_protected) {
    protected_.erase(key_of(hash, entry));
    protected_bytes_ -= entry.info.bytes;
  } else {
    probation_.erase(entry.probation_pos);
    probation_bytes_ -= entry.info.bytes;
  }
  entries_.erase(it);
}

std::vector<BlockHash> RetentionPolicy::take_expired(int64_t now_s) {
  std::vector<BlockHash> expired;
  for (const auto& [hash, entry] : entries_) {
    if (is_expired(entry, now_s)) expired.push_back(hash);
  }
  for (const BlockHash& hash : expired) remove(hash);
  return expired;
}

}  // namespace deepinfer
