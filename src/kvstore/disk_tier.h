// DiskTier: page images as files in a local directory, one file per page
// (DIR/pages/<first 2 hex digits>/<chain hash hex>.page), written to DIR/tmp, fsynced, renamed
// into place and the directory fsynced (durable_file.h), so a reader, a crash or a power loss
// sees a whole page or none. The index lives in memory, is rebuilt at start-up by reading every
// page's header (torn or foreign files and dead writers' temporary files are deleted), and falls
// back to the file system on a miss so that processes sharing the directory see each other's
// pages. A page's mtime is its last use (the sliding TTL survives restarts).
#pragma once

#include <mutex>
#include <string>

#include "kvstore/durable_file.h"
#include "kvstore/store_tier.h"

namespace deepinfer {

// The file that holds a page in a store directory (tests corrupt it, benchmarks drop its cache).
std::string disk_page_path(const std::string& dir, const BlockHash& hash);

class DiskTier final : public StoreTier {
 public:
  // Never fails: an unusable directory is reported (rate-limited warning, error counter) and
  // every operation then misses. Images read from files are allocated from allocator (pinned
  // slabs on CUDA), which must outlive the pages.
  DiskTier(std::string dir, int64_t capacity_bytes, const RetentionConfig& retention,
           HostAllocator& allocator = default_host_allocator());

  std::string_view name() const override { return "disk"; }
  bool contains(const BlockHash& hash) override;
  std::optional<SharedPage> get(const BlockHash& hash) override;
  bool put(const BlockHash& hash, const PageEntryInfo& info, const SharedPage& image) override;
  void drop_corrupt(const BlockHash& hash) override;
  void expire() override;
  TierStats stats() const override;
  TierCost measure_cost(int64_t probe_bytes) override;

  std::string page_path(const BlockHash& hash) const { return disk_page_path(dir_, hash); }
  // Pages found by the start-up scan, and the files it deleted: torn or foreign page files, and
  // temporary files of writers that died before their rename.
  int64_t num_rebuilt_pages() const { return num_rebuilt_pages_; }
  int64_t num_discarded_files() const { return num_discarded_files_; }
  // Test hook (durable_file.h); set before the first put.
  void set_before_rename(BeforeRename hook) { before_rename_ = std::move(hook); }

 private:
  void rebuild_index();
  // Reads a page file's header and records it (lock held). False if the file is unusable.
  bool adopt_file(const BlockHash& hash, const std::string& path);
  void remove_file(const BlockHash& hash);  // lock held
  void fail(const std::string& what, int error_number);

  std::string dir_;
  RetentionConfig retention_;
  HostAllocator& allocator_;
  mutable std::mutex mutex_;
  RetentionPolicy policy_;
  TierCounters counters_;
  bool usable_ = true;
  int64_t num_rebuilt_pages_ = 0;
  int64_t num_discarded_files_ = 0;
  BeforeRename before_rename_;
};

}  // namespace deepinfer
