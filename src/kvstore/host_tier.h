// HostTier: page images in host memory, bounded in bytes (pinned on CUDA through the
// allocator hook in page_format.h). The first tier every load tries and every write fills.
#pragma once

#include <memory>
#include <mutex>
#include <unordered_map>

#include "kvstore/store_tier.h"

namespace deepinfer {

class HostTier final : public StoreTier {
 public:
  HostTier(int64_t capacity_bytes, const RetentionConfig& retention);

  std::string_view name() const override { return "host"; }
  bool contains(const BlockHash& hash) override;
  std::optional<SharedPage> get(const BlockHash& hash) override;
  bool put(const BlockHash& hash, const PageEntryInfo& info, const SharedPage& image) override;
  void drop_corrupt(const BlockHash& hash) override;
  void expire() override;
  TierStats stats() const override;
  TierCost measure_cost(int64_t probe_bytes) override;

 private:
  RetentionConfig retention_;
  mutable std::mutex mutex_;
  RetentionPolicy policy_;
  std::unordered_map<BlockHash, SharedPage, BlockHashHasher> pages_;
  TierCounters counters_;
};

}  // namespace deepinfer
