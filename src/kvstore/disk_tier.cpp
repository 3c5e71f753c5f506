// Local-directory tier: one file per page, temp file + fsync + rename, index rebuilt from headers.
#include "kvstore/disk_tier.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <vector>

#include "core/sha256.h"
#include "kvstore/durable_file.h"

namespace deepinfer {
namespace {

namespace fs = std::filesystem;

// A temp file this old belongs to a writer that died (a live one renames within seconds).
constexpr int64_t kStaleTempSeconds = 600;

void set_mtime(int fd, int64_t unix_s) {
  const timespec times[2] = {{static_cast<time_t>(unix_s), 0}, {static_cast<time_t>(unix_s), 0}};
  ::futimens(fd, times);
}

}  // namespace

DiskTier::DiskTier(std::string dir, int64_t capacity_bytes, const RetentionConfig& retention,
                   HostAllocator& allocator)
    : dir_(std::move(dir)), retention_(retention), allocator_(allocator), policy_(retention, capacity_bytes) {
  std::error_code ec;
  fs::create_directories(fs::path(dir_) / "pages", ec);
  if (!ec) fs::create_directories(fs::path(dir_) / "tmp", ec);
  if (ec) {
    usable_ = false;
    fail("cannot create the store directory " + dir_ + ": " + ec.message(), 0);
    return;
  }
  rebuild_index();
}

std::string disk_page_path(const std::string& dir, const BlockHash& hash) {
  const std::string hex = hash_hex(hash);
  return dir + "/pages/" + hex.substr(0, 2) + "/" + hex + ".page";
}

void DiskTier::fail(const std::string& what, int error_number) {
  counters_.errors++;
  warn_rate_limited("disk:" + dir_, what + (error_number != 0 ? std::string(": ") + std::strerror(error_number) : "") +
                                        " (pages are recomputed instead)");
}

void DiskTier::rebuild_index() {
  std::lock_guard lock(mutex_);
  std::error_code ec;
  const int64_t now = retention_.now();
  // A temporary file is never read as a page: it is a write that did not reach its rename.
  // Deleted when its writer is known to be dead, or once it is too old for a live one.
  for (const auto& entry : fs::directory_iterator(fs::path(dir_) / "tmp", ec)) {
    struct stat st {};
    if (temp_file_writer_is_gone(entry.path().filename().string()) ||
        (::stat(entry.path().c_str(), &st) == 0 && now - st.st_mtime > kStaleTempSeconds)) {
      std::error_code remove_ec;
      if (fs::remove(entry.path(), remove_ec)) ++num_discarded_files_;
    }
  }
  for (const auto& shard : fs::directory_iterator(fs::path(dir_) / "pages", ec)) {
    std::error_code shard_ec;
    for (const auto& file : fs::directory_iterator(shard.path(), shard_ec)) {
      const std::string stem = file.path().stem().string();
      const std::optional<BlockHash> hash = digest_from_hex(stem);
      if (!hash || file.path().extension() != ".page") continue;
      if (adopt_file(*hash, file.path().string())) {
        ++num_rebuilt_pages_;
      } else {
        ++num_discarded_files_;
        fs::remove(file.path(), shard_ec);
      }
    }
  }
  for (const BlockHash& hash : policy_.take_expired(now)) {
    remove_file(hash);
    counters_.expirations++;
  }
}

bool DiskTier::adopt_file(const BlockHash& hash, const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  struct stat st {};
  uint8_t bytes[sizeof(PageHeader)];
  const bool read_ok = ::fstat(fd, &st) == 0 && read_all(fd, bytes, sizeof(bytes));
  ::close(fd);
  if (!read_ok) return false;
  auto header = parse_page_header(bytes, static_cast<uint64_t>(st.st_size));
  if (!header.ok() || std::memcmp(header->chain_hash, hash.data(), hash.size()) != 0) return false;
  PageEntryInfo info;
  info.bytes = st.st_size;
  info.depth = static_cast<int32_t>(header->page_index);
  info.traffic_class = static_cast<TrafficClass>(header->traffic_class);
  const std::optional<std::vector<BlockHash>> victims = policy_.admit(hash, info, st.st_mtime);
  if (!victims) return false;
  for (const BlockHash& victim : *victims) {
    remove_file(victim);
    counters_.evictions++;
  }
  return true;
}

void DiskTier::remove_file(const BlockHash& hash) {
  policy_.remove(hash);
  ::unlink(page_path(hash).c_str());
}

bool DiskTier::contains(const BlockHash& hash) {
  std::lock_guard lock(mutex_);
  if (!usable_) return false;
  if (policy_.contains(hash)) return true;
  // Another process sharing the directory may have written it since our scan.
  const std::string path = page_path(hash);
  return ::access(path.c_str(), F_OK) == 0 && adopt_file(hash, path);
}

std::optional<SharedPage> DiskTier::get(const BlockHash& hash) {
  const std::string path = page_path(hash);
  const int64_t now = retention_.now();
  {
    // The lock covers the index only: file I/O runs unlocked so loads never queue behind a
    // writer's fsync, and the engine thread's contains() never waits on the disk.
    std::lock_guard lock(mutex_);
    if (!usable_ || (!policy_.contains(hash) && !(::access(path.c_str(), F_OK) == 0 && adopt_file(hash, path)))) {
      counters_.misses++;
      return std::nullopt;
    }
    if (!policy_.touch(hash, now)) {
      ::unlink(path.c_str());
      counters_.expirations++;
      counters_.misses++;
      return std::nullopt;
    }
  }
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  struct stat st {};
  if (fd < 0 || ::fstat(fd, &st) != 0) {
    if (fd >= 0) ::close(fd);
    std::lock_guard lock(mutex_);
    policy_.remove(hash);  // evicted meanwhile, here or by another process sharing the directory
    counters_.misses++;
    return std::nullopt;
  }
  auto image = std::make_shared<PageBuffer>(static_cast<size_t>(st.st_size), allocator_);
  const bool ok = read_all(fd, image->data(), image->size());
  const int error_number = errno;
  if (ok) set_mtime(fd, now);
  ::close(fd);
  std::lock_guard lock(mutex_);
  if (!ok) {
    fail("cannot read " + path, error_number);
    counters_.misses++;
    return std::nullopt;
  }
  counters_.hits++;
  counters_.bytes_read += st.st_size;
  return image;
}

bool DiskTier::put(const BlockHash& hash, const PageEntryInfo& info, const SharedPage& image) {
  const std::string path = page_path(hash);
  const int64_t now = retention_.now();
  {
    std::lock_guard lock(mutex_);
    if (!usable_) return false;
    const bool held = policy_.contains(hash);
    if (held && policy_.touch(hash, now)) {
      // Already stored: a rewrite is a use (the file's mtime carries it across restarts).
      const timespec times[2] = {{static_cast<time_t>(now), 0}, {static_cast<time_t>(now), 0}};
      if (::utimensat(AT_FDCWD, path.c_str(), times, 0) == 0) return true;
      // The file is gone (evicted by another process sharing the directory, or deleted by
      // hand): the index must not keep a page it cannot read, so the page is written again.
      policy_.remove(hash);
    } else if (held) {
      counters_.expirations++;  // touch forgot it; the file is replaced below
    }
  }
  Result<void> written = write_file_durably(dir_ + "/tmp", path, image->bytes(), now, before_rename_);
  std::lock_guard lock(mutex_);
  if (!written.ok()) {
    fail("cannot write a page: " + written.error().message, 0);
    return false;
  }
  const std::optional<std::vector<BlockHash>> victims = policy_.admit(hash, info, now);
  if (!victims) {
    ::unlink(path.c_str());
    return false;
  }
  for (const BlockHash& victim : *victims) {
    remove_file(victim);
    counters_.evictions++;
  }
  counters_.pages_written++;
  counters_.bytes_written += static_cast<int64_t>(image->size());
  return true;
}

void DiskTier::drop_corrupt(const BlockHash& hash) {
  std::lock_guard lock(mutex_);
  counters_.checksum_failures++;
  remove_file(hash);
}

void DiskTier::expire() {
  std::lock_guard lock(mutex_);
  for (const BlockHash& hash : policy_.take_expired(retention_.now())) {
    ::unlink(page_path(hash).c_str());
    counters_.expirations++;
  }
}

TierStats DiskTier::stats() const {
  std::lock_guard lock(mutex_);
  TierStats s = counters_.snapshot(name());
  s.num_pages = static_cast<int64_t>(policy_.num_pages());
  s.used_bytes = policy_.used_bytes();
  return s;
}

TierCost DiskTier::measure_cost(int64_t probe_bytes) {
  TierCost cost;
  const std::string path = dir_ + "/tmp/" + temp_file_name();
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) return cost;
  std::vector<uint8_t> bytes(static_cast<size_t>(probe_bytes), 7);
  const bool written = write_all(fd, bytes.data(), bytes.size()) && ::fsync(fd) == 0;
  // Dropped from the page cache so the read measures the device, as a cold page would.
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  const auto start = std::chrono::steady_clock::now();
  const bool read_ok = written && ::pread(fd, bytes.data(), bytes.size(), 0) == static_cast<ssize_t>(bytes.size());
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ::close(fd);
  // The per-page cost: open, read a header-sized piece, close, on a cold file.
  const auto open_start = std::chrono::steady_clock::now();
  const int probe = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (probe >= 0) {
    ::posix_fadvise(probe, 0, 0, POSIX_FADV_DONTNEED);
    uint8_t header[sizeof(PageHeader)];
    read_all(probe, header, sizeof(header));
    ::close(probe);
  }
  const double open_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - open_start).count();
  ::unlink(path.c_str());
  if (!read_ok) return cost;
  cost.bytes_per_s = static_cast<double>(probe_bytes) / std::max(seconds, 1e-9);
  cost.seconds_per_page = open_seconds;
  cost.probe = "cold open + read()";
  return cost;
}

}  // namespace deepinfer
