// deepinfer-bench-kvstore-bandwidth: load bandwidth of each KV store tier next to the raw
// bandwidth of its medium, measured in the same run on the same bytes:
//   host  - KvStore loads (lookup + XXH3-128 verification) vs memcpy of the same bytes
//   disk  - KvStore loads with the page files dropped from the page cache vs plain read()s of
//           the same files, dropped the same way (posix_fadvise DONTNEED)
//   redis - KvStore loads vs raw hiredis GETs of the same values (redis-server started here on
//           a free loopback port; skipped when redis-server is not installed)
// Usage: deepinfer-bench-kvstore-bandwidth [--page-mib 2] [--pages 64] [--dir DIR]
// Prints a table, then one JSON line.
#include <fcntl.h>
#include <hiredis/hiredis.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <thread>
#include <vector>

#include "kvstore/disk_tier.h"
#include "kvstore/kv_store.h"
#include "tool_flags.h"

extern char** environ;

namespace deepinfer::bench {
namespace {

constexpr const char* kUsage =
    "usage: deepinfer-bench-kvstore-bandwidth [--page-mib 2] [--pages 64] [--dir DIR]\n"
    "Load bandwidth of the host, disk and Redis tiers of the KV store next to memcpy, cold read()\n"
    "and raw Redis GET bandwidth on the same bytes.\n";

constexpr int32_t kPageTokens = 128;

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

struct Pages {
  std::vector<PageRequest> requests;
  std::vector<std::vector<uint8_t>> payloads;
};

Pages make_pages(int64_t num_pages, size_t payload_bytes) {
  Pages pages;
  BlockHash hash = prefix_root_hash("bench-bandwidth", "");
  for (int64_t i = 0; i < num_pages; ++i) {
    std::vector<int32_t> tokens(kPageTokens);
    for (int32_t t = 0; t < kPageTokens; ++t) tokens[static_cast<size_t>(t)] = static_cast<int32_t>(i * 131 + t);
    hash = chain_block_hash(hash, tokens.data(), kPageTokens, {});
    pages.requests.push_back(PageRequest{hash, static_cast<int32_t>(i), tokens});
    pages.payloads.emplace_back(payload_bytes, static_cast<uint8_t>(i));
  }
  return pages;
}

Result<std::unique_ptr<KvStore>> filled_store(const KvStoreConfig& config, const Pages& pages) {
  auto store = KvStore::open(config, "bench-bandwidth");
  if (!store.ok()) return store.error();
  for (size_t i = 0; i < pages.requests.size(); ++i) {
    const PageRequest& r = pages.requests[i];
    while (!(*store)->enqueue_write(PageWrite{r.hash, r.page_index, r.token_ids, pages.payloads[i], TrafficClass::kDefault})) {
      (*store)->flush();
    }
  }
  (*store)->flush();
  return store;
}

// GB/s of one store load of every page; fails if a page is missing.
Result<double> store_load_gbps(KvStore& store, const Pages& pages, int64_t image_bytes) {
  const auto start = std::chrono::steady_clock::now();
  const auto loaded = store.load_chain(pages.requests, static_cast<int64_t>(pages.payloads[0].size()), 1e9);
  const double seconds = seconds_since(start);
  if (loaded.size() != pages.requests.size()) return Error{"the store lost pages during the bandwidth run"};
  return static_cast<double>(image_bytes) * static_cast<double>(loaded.size()) / seconds / 1e9;
}

void drop_cache(const std::vector<std::string>& files) {
  for (const std::string& path : files) {
    const int fd = ::open(path.c_str(), O_RDONLY);
    if (fd < 0) continue;
    ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    ::close(fd);
  }
}

double raw_read_gbps(const std::vector<std::string>& files, size_t image_bytes) {
  std::vector<uint8_t> buffer(image_bytes);
  drop_cache(files);
  size_t total = 0;
  const auto start = std::chrono::steady_clock::now();
  for (const std::string& path : files) {
    const int fd = ::open(path.c_str(), O_RDONLY);
    ssize_t n = 0;
    while ((n = ::read(fd, buffer.data(), buffer.size())) > 0) total += static_cast<size_t>(n);
    ::close(fd);
  }
  return static_cast<double>(total) / seconds_since(start) / 1e9;
}

int free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  ::close(fd);
  return ntohs(addr.sin_port);
}

// Starts redis-server on a free loopback port; returns its pid and port, or pid -1.
std::pair<pid_t, int> start_redis() {
  const int port = free_port();
  const std::string port_text = std::to_string(port);
  const char* argv[] = {"redis-server", "--port", port_text.c_str(), "--bind", "127.0.0.1", "--save", "",
                        "--appendonly", "no", "--logfile", "/dev/null", nullptr};
  pid_t pid = -1;
  if (::posix_spawnp(&pid, "redis-server", nullptr, nullptr, const_cast<char**>(argv), environ) != 0) return {-1, 0};
  for (int attempt = 0; attempt < 500; ++attempt) {
    redisContext* c = redisConnect("127.0.0.1", port);
    const bool up = c != nullptr && c->err == 0;
    if (c != nullptr) redisFree(c);
    if (up) return {pid, port};
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ::kill(pid, SIGKILL);
  ::waitpid(pid, nullptr, 0);
  return {-1, 0};
}

double raw_redis_gbps(int port, const Pages& pages) {
  redisContext* c = redisConnect("127.0.0.1", port);
  size_t total = 0;
  const auto start = std::chrono::steady_clock::now();
  for (const PageRequest& r : pages.requests) {
    const std::string key = "dikv:" + hash_hex(r.hash);
    auto* reply = static_cast<redisReply*>(redisCommand(c, "GET %b", key.data(), key.size()));
    if (reply != nullptr && reply->type == REDIS_REPLY_STRING) total += reply->len;
    freeReplyObject(reply);
  }
  const double gbps = static_cast<double>(total) / seconds_since(start) / 1e9;
  redisFree(c);
  return gbps;
}

Result<void> run(int argc, char** argv) {
  auto flags = parse_tool_flags(argc, argv, {"--page-mib", "--pages", "--dir"});
  if (!flags.ok()) return flags.error();
  const double page_mib = flags->count("--page-mib") ? std::stod(flags->at("--page-mib")) : 2.0;
  const int64_t num_pages = flags->count("--pages") ? std::stoll(flags->at("--pages")) : 64;
  const std::string dir = flags->count("--dir") ? flags->at("--dir")
                                                : (std::filesystem::temp_directory_path() / "dikv-bench-bandwidth").string();
  std::filesystem::remove_all(dir);
  const auto payload_bytes = static_cast<size_t>(page_mib * (1 << 20));
  const Pages pages = make_pages(num_pages, payload_bytes);
  const auto image_bytes = static_cast<int64_t>(page_image_bytes(kPageTokens, payload_bytes));
  nlohmann::json out = {{"page_bytes", image_bytes}, {"pages", num_pages}};
  std::printf("%-6s %14s %14s %8s  (%lld pages of %.2f MiB)\n", "tier", "store GB/s", "raw GB/s", "ratio",
              static_cast<long long>(num_pages), static_cast<double>(image_bytes) / (1 << 20));

  KvStoreConfig host;
  host.host_bytes = image_bytes * (num_pages + 1);
  host.cost_guard = false;
  auto host_store = filled_store(host, pages);
  if (!host_store.ok()) return host_store.error();
  auto host_gbps = store_load_gbps(**host_store, pages, image_bytes);
  if (!host_gbps.ok()) return host_gbps.error();
  // The raw medium: copying every page's bytes out of host memory once (the working set is far
  // larger than the caches, as the store's is).
  std::vector<uint8_t> dst(payload_bytes);
  std::memcpy(dst.data(), pages.payloads[0].data(), payload_bytes);  // fault the destination in
  const auto copy_start = std::chrono::steady_clock::now();
  for (const auto& payload : pages.payloads) std::memcpy(dst.data(), payload.data(), payload.size());
  const double memcpy_gbps =
      static_cast<double>(payload_bytes) * static_cast<double>(num_pages) / seconds_since(copy_start) / 1e9;
  std::printf("%-6s %14.2f %14.2f %8.2f  (raw: memcpy)\n", "host", *host_gbps, memcpy_gbps, *host_gbps / memcpy_gbps);
  out["host"] = {{"store_gbps", *host_gbps}, {"memcpy_gbps", memcpy_gbps}};
  host_store->reset();

  KvStoreConfig disk;
  disk.dir = dir;
  disk.host_bytes = 0;
  disk.cost_guard = false;
  auto disk_store = filled_store(disk, pages);
  if (!disk_store.ok()) return disk_store.error();
  std::vector<std::string> files;
  for (const PageRequest& r : pages.requests) files.push_back(disk_page_path(dir, r.hash));
  // A shared disk's speed drifts: the raw figure is the mean of one read before and one after.
  const double read_before_gbps = raw_read_gbps(files, static_cast<size_t>(image_bytes));
  drop_cache(files);
  auto disk_gbps = store_load_gbps(**disk_store, pages, image_bytes);
  if (!disk_gbps.ok()) return disk_gbps.error();
  const double read_gbps = (read_before_gbps + raw_read_gbps(files, static_cast<size_t>(image_bytes))) / 2;
  std::printf("%-6s %14.2f %14.2f %8.2f  (raw: read() after POSIX_FADV_DONTNEED)\n", "disk", *disk_gbps, read_gbps,
              *disk_gbps / read_gbps);
  out["disk"] = {{"store_gbps", *disk_gbps}, {"read_gbps", read_gbps}};
  disk_store->reset();
  std::filesystem::remove_all(dir);

  const auto [redis_pid, port] = start_redis();
  if (redis_pid < 0) {
    std::printf("%-6s skipped: redis-server is not installed or did not start\n", "redis");
  } else {
    KvStoreConfig redis;
    redis.host_bytes = 0;
    redis.backend = "redis://127.0.0.1:" + std::to_string(port);
    redis.cost_guard = false;
    auto redis_store = filled_store(redis, pages);
    Result<double> redis_gbps = redis_store.ok() ? store_load_gbps(**redis_store, pages, image_bytes)
                                                 : Result<double>(redis_store.error());
    const double get_gbps = (raw_redis_gbps(port, pages) + raw_redis_gbps(port, pages)) / 2;
    ::kill(redis_pid, SIGKILL);
    ::waitpid(redis_pid, nullptr, 0);
    if (!redis_gbps.ok()) return redis_gbps.error();
    std::printf("%-6s %14.2f %14.2f %8.2f  (raw: hiredis GET, loopback)\n", "redis", *redis_gbps, get_gbps,
                *redis_gbps / get_gbps);
    out["redis"] = {{"store_gbps", *redis_gbps}, {"get_gbps", get_gbps}};
  }
  std::printf("%s\n", out.dump().c_str());
  return {};
}

}  // namespace
}  // namespace deepinfer::bench

int main(int argc, char** argv) {
  return deepinfer::bench::tool_main(argc, argv, "deepinfer-bench-kvstore-bandwidth", deepinfer::bench::kUsage,
                                     deepinfer::bench::run);
}
