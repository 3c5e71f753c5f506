// RedisTier: the shared tier for small deployments. One Redis key per page
// ("dikv:<chain hash hex>") holds the page image, with the traffic class's TTL as the key's
// expiry (refreshed on every hit), so Redis is both the cluster-wide index and the byte store
// and its own expiry and maxmemory policy do retention. Any engine process pointed at the same
// server reads what any other wrote. A failed command (server down, timeout) is a miss: the
// connection is dropped and retried at most once a second.
#pragma once

#include <chrono>
#include <mutex>
#include <string>

#include "kvstore/store_tier.h"

struct redisContext;

namespace deepinfer {

struct RedisAddress {
  std::string host;
  int port = 6379;
};

// Parses "redis://host:port" (port optional); the error names the URL.
Result<RedisAddress> parse_redis_url(std::string_view url);

class RedisTier final : public StoreTier {
 public:
  // Images read from Redis are allocated from allocator, which must outlive the pages.
  RedisTier(RedisAddress address, const RetentionConfig& retention, HostAllocator& allocator = default_host_allocator());
  ~RedisTier() override;

  std::string_view name() const override { return "redis"; }
  bool contains(const BlockHash& hash) override;
  std::optional<SharedPage> get(const BlockHash& hash) override;
  bool put(const BlockHash& hash, const PageEntryInfo& info, const SharedPage& image) override;
  void drop_corrupt(const BlockHash& hash) override;
  void expire() override {}  // Redis expires keys itself
  TierStats stats() const override;
  TierCost measure_cost(int64_t probe_bytes) override;

 private:
  // The live connection, reconnecting when the back-off allows; null when unavailable (lock held).
  redisContext* connection();
  void fail(const std::string& what);  // lock held: drops the connection

  RedisAddress address_;
  RetentionConfig retention_;
  HostAllocator& allocator_;
  mutable std::mutex mutex_;
  redisContext* context_ = nullptr;
  std::chrono::steady_clock::time_point retry_after_{};
  TierCounters counters_;
};

}  // namespace deepinfer
