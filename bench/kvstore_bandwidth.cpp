// deepinfer-bench-kvstore-bandwidth: load bandwidth of each KV store tier next to the raw
// bandwidth of its medium, measured in the same run on the same bytes:
//   host  - KvStore loads (lookup + XXH3-128 verification, on the loading thread or on the store's
//           verify threads as the engine loads) vs memcpy of the same bytes
//   disk  - KvStore loads with the page files dropped from the page cache vs plain read()s of
//           the same files, dropped the same way (posix_fadvise DONTNEED)
//   redis - KvStore loads vs raw hiredis GETs of the same values (redis-server started here on
//           a free loopback port; skipped when redis-server is not installed)
//   with --device cuda, host tier -> device memory: KvStore loads into the backend's pinned slab
//           pool then copy_to_device (direct DMA), the same with ordinary page images (staged
//           copies, as before the pool), vs raw cudaMemcpy H2D from pinned and from pageable memory;
//           each page goes up in --copies-per-page pieces (64: K and V of 32 layers of a Llama-3-8B
//           page) as one copy each, or as the engine loads it now: one scatter_to_device launch;
//           float32 pages and the half-size pages of a bf16 cache (its own bytes, copied as they
//           are); body checks before the upload or beside it; the raw copies whole. Device rows
//           print GB/s of the bytes each page moves and the time per page
// Usage: deepinfer-bench-kvstore-bandwidth [--page-mib 2] [--pages 64] [--dir DIR] [--device cuda]
//        [--copies-per-page 64]
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
#include "runtime/backend.h"
#include "tool_flags.h"

#ifdef DEEPINFER_HAS_CUDA
#include <cuda_runtime.h>
#endif

extern char** environ;

namespace deepinfer::bench {
namespace {

constexpr const char* kUsage =
    "usage: deepinfer-bench-kvstore-bandwidth [--page-mib 2] [--pages 64] [--dir DIR] [--device cuda]\n"
    "       [--copies-per-page 64]\n"
    "Load bandwidth of the host, disk and Redis tiers of the KV store next to memcpy, cold read()\n"
    "and raw Redis GET bandwidth on the same bytes; with --device cuda also host tier -> GPU memory\n"
    "(pinned slabs, direct DMA) next to raw pinned and pageable cudaMemcpy.\n";

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
    while (!(*store)->enqueue_write(PageWrite{r.hash, r.page_index, r.token_ids, pages.payloads[i],
                                                        TrafficClass::kDefault, nullptr})) {
      (*store)->flush();
    }
  }
  (*store)->flush();
  return store;
}

// GB/s of one store load of every page; fails if a page is missing. kBeside: until every page's
// body check on the store's verify threads passed.
Result<double> store_load_gbps(KvStore& store, const Pages& pages, int64_t image_bytes,
                               BodyCheck check = BodyCheck::kBefore) {
  const auto start = std::chrono::steady_clock::now();
  const auto loaded = store.load_chain(pages.requests, static_cast<int64_t>(pages.payloads[0].size()), 1e9, check);
  for (const LoadedPage& page : loaded) {
    if (!page.verified()) return Error{"a page failed its body check during the bandwidth run"};
  }
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

// How a loaded page goes up: copy_to_device per piece (as before one-launch loads), or all pieces
// in one scatter_to_device as the engine loads a page. Pages hold the cache's own element type
// (dtype), so every piece is copied as it is: a bf16 page is half the bytes of a float32 one.
enum class Upload { kPerPiece, kScatter };

// Enqueues the upload of every loaded payload in copies_per_page pieces (K and V of each layer).
void upload_pages(Backend& backend, const std::vector<LoadedPage>& loaded, size_t payload_bytes, DeviceBuffer& dst,
                  size_t copies_per_page, Upload upload, DType dtype) {
  // Whole 4-byte words per piece, as the cache's blocks are.
  const size_t piece = (payload_bytes + 4 * copies_per_page - 1) / (4 * copies_per_page) * 4;
  for (size_t i = 0; i < loaded.size(); ++i) {
    std::vector<HostPiece> pieces;
    for (size_t offset = 0; offset < payload_bytes; offset += piece) {
      uint8_t* to = dst.as<uint8_t>() + i * payload_bytes + offset;
      const size_t bytes = std::min(piece, payload_bytes - offset);
      if (upload == Upload::kPerPiece) {
        backend.copy_to_device(to, loaded[i].payload.data() + offset, bytes);
      } else {
        pieces.push_back({to, offset, bytes, dtype, dtype});
      }
    }
    if (!pieces.empty()) backend.scatter_to_device(loaded[i].payload.data(), pieces);
  }
}

// One page set in one element type, in a store whose host tier lives in the backend's pinned pool.
struct DevicePages {
  DType dtype = DType::kF32;
  Pages pages;
  std::unique_ptr<KvStore> store;
  size_t payload_bytes() const { return pages.payloads[0].size(); }
};

// GB/s (payload bytes moved) of store loads from the host tier followed by upload_pages, until the
// device has them (a 4-byte read back waits for the stream). check kBefore: each page's body is
// checked on the loading thread before its upload; kBeside: on the store's verify threads while
// the uploads run, every page waited for before the end (as the engine commits). Best of three.
Result<double> store_to_device_gbps(DevicePages& set, Backend& backend, DeviceBuffer& dst, size_t copies_per_page,
                                    Upload upload, BodyCheck check) {
  const size_t payload_bytes = set.payload_bytes();
  double best = 0.0;
  for (int round = 0; round < 3; ++round) {
    const auto start = std::chrono::steady_clock::now();
    const auto loaded = set.store->load_chain(set.pages.requests, static_cast<int64_t>(payload_bytes), 1e9, check);
    upload_pages(backend, loaded, payload_bytes, dst, copies_per_page, upload, set.dtype);
    for (const LoadedPage& page : loaded) {
      if (!page.verified()) return Error{"a page failed its body check during the bandwidth run"};
    }
    uint32_t probe = 0;
    backend.copy_to_host(&probe, dst.data(), sizeof(probe));
    if (loaded.size() != set.pages.requests.size()) return Error{"the store lost pages during the bandwidth run"};
    best = std::max(best, static_cast<double>(payload_bytes * loaded.size()) / seconds_since(start) / 1e9);
  }
  return best;
}

void print_device_row(const char* name, double gbps, size_t payload_bytes, const std::string& what) {
  std::printf("%-6s %14.2f %14s %8s  (%.0f us/page of %.2f MiB; %s)\n", name, gbps, "", "",
              static_cast<double>(payload_bytes) / (gbps * 1e3), static_cast<double>(payload_bytes) / (1 << 20),
              what.c_str());
}

// Host tier -> device: the store with the backend's pinned pool (float32 pages and the bf16 pages
// of a bf16 cache, body checks before or beside the uploads), the store with ordinary memory,
// and the raw copies of the same bytes.
Result<void> run_device(const std::string& device, const Pages& pages, int64_t image_bytes, size_t copies_per_page,
                        nlohmann::json& out) {
  auto backend = make_backend(device);
  if (!backend.ok()) return backend.error();
  const size_t payload_bytes = pages.payloads[0].size();
  const size_t num_pages = pages.payloads.size();
  DeviceBuffer dst = (*backend)->allocate(payload_bytes * num_pages);
  // Slabs for both page sets (a bf16 image fits a float32 one's slab).
  std::shared_ptr<HostSlabPool> pool = (*backend)->make_pinned_pool(
      static_cast<size_t>(image_bytes) * (2 * num_pages + 8), static_cast<size_t>(image_bytes));
  if (!pool) return Error{"--device " + device + " has no pinned memory pool (a host backend)"};
  KvStoreConfig config;
  config.host_bytes = image_bytes * static_cast<int64_t>(num_pages + 1);
  config.cost_guard = false;
  config.host_pool = pool;
  DevicePages f32{DType::kF32, pages, nullptr};
  auto f32_store = filled_store(config, f32.pages);
  if (!f32_store.ok()) return f32_store.error();
  f32.store = std::move(*f32_store);
  DevicePages bf16{DType::kBF16, make_pages(static_cast<int64_t>(num_pages), payload_bytes / 2), nullptr};
  config.kv_dtype = DType::kBF16;
  auto bf16_store = filled_store(config, bf16.pages);
  if (!bf16_store.ok()) return bf16_store.error();
  bf16.store = std::move(*bf16_store);
  const auto measure = [&](DevicePages& set, Upload upload, BodyCheck check) {
    return store_to_device_gbps(set, **backend, dst, copies_per_page, upload, check);
  };
  auto pinned_gbps = measure(f32, Upload::kPerPiece, BodyCheck::kBefore);
  auto scatter_gbps = measure(f32, Upload::kScatter, BodyCheck::kBefore);
  auto scatter_bf16_gbps = measure(bf16, Upload::kScatter, BodyCheck::kBefore);
  auto beside_gbps = measure(f32, Upload::kScatter, BodyCheck::kBeside);
  auto beside_bf16_gbps = measure(bf16, Upload::kScatter, BodyCheck::kBeside);
  for (const Result<double>* r : {&pinned_gbps, &scatter_gbps, &scatter_bf16_gbps, &beside_gbps, &beside_bf16_gbps}) {
    if (!r->ok()) return r->error();
  }
  const int64_t fallbacks = f32.store->stats().host_pool_fallbacks + bf16.store->stats().host_pool_fallbacks;
  config.host_pool = nullptr;
  config.kv_dtype = DType::kF32;
  auto plain_store = filled_store(config, pages);
  if (!plain_store.ok()) return plain_store.error();
  DevicePages plain{DType::kF32, pages, std::move(*plain_store)};
  auto plain_gbps = measure(plain, Upload::kPerPiece, BodyCheck::kBefore);
  if (!plain_gbps.ok()) return plain_gbps.error();
  plain.store.reset();
  const std::string pieces = std::to_string(copies_per_page) + " pieces";
  print_device_row("pinned", *pinned_gbps, payload_bytes,
                   "host tier -> " + device + ", f32 pages in pinned slabs, a DMA per piece, " + pieces + "; " +
                       std::to_string(fallbacks) + " pool fallbacks");
  print_device_row("scat", *scatter_gbps, payload_bytes, "f32 pages, one scatter launch/page, body check before");
  print_device_row("scat16", *scatter_bf16_gbps, payload_bytes / 2,
                   "bf16 pages (a bf16 cache's own bytes), one scatter launch/page, body check before");
  print_device_row("besid", *beside_gbps, payload_bytes, "f32 pages, one scatter launch/page, body check beside");
  print_device_row("besd16", *beside_bf16_gbps, payload_bytes / 2,
                   "bf16 pages, one scatter launch/page, body check beside the upload");
  print_device_row("plain", *plain_gbps, payload_bytes, "f32 pages in ordinary memory, staged copies, " + pieces);
  out["device"] = {{"store_pinned_gbps", *pinned_gbps},
                   {"store_scatter_gbps", *scatter_gbps},
                   {"store_scatter_bf16_gbps", *scatter_bf16_gbps},
                   {"store_beside_gbps", *beside_gbps},
                   {"store_beside_bf16_gbps", *beside_bf16_gbps},
                   {"store_pageable_gbps", *plain_gbps},
                   {"f32_page_bytes", payload_bytes},
                   {"bf16_page_bytes", payload_bytes / 2},
                   {"copies_per_page", copies_per_page},
                   {"pool_fallbacks", fallbacks}};
#ifdef DEEPINFER_HAS_CUDA
  // Raw: cudaMemcpy of the same payloads from the pool's slabs and from pageable vectors.
  const auto loaded = f32.store->load_chain(pages.requests, static_cast<int64_t>(payload_bytes), 1e9);
  const auto loaded_bf16 = bf16.store->load_chain(bf16.pages.requests, static_cast<int64_t>(payload_bytes / 2), 1e9);
  const auto raw_gbps = [&](auto source_of) {
    double best = 0.0;
    for (int round = 0; round < 3; ++round) {
      const auto start = std::chrono::steady_clock::now();
      for (size_t i = 0; i < num_pages; ++i) {
        cudaMemcpy(dst.as<uint8_t>() + i * payload_bytes, source_of(i), payload_bytes, cudaMemcpyHostToDevice);
      }
      best = std::max(best, static_cast<double>(payload_bytes * num_pages) / seconds_since(start) / 1e9);
    }
    return best;
  };
  const double raw_pinned = raw_gbps([&](size_t i) { return loaded[i].payload.data(); });
  // The uploads alone, from the loaded slabs (no lookup or verification): what the engine thread
  // pays per page hit.
  const auto upload_gbps = [&](const std::vector<LoadedPage>& set, size_t bytes, Upload upload, DType dtype) {
    double best = 0.0;
    for (int round = 0; round < 3; ++round) {
      const auto start = std::chrono::steady_clock::now();
      upload_pages(**backend, set, bytes, dst, copies_per_page, upload, dtype);
      cudaDeviceSynchronize();
      best = std::max(best, static_cast<double>(bytes * num_pages) / seconds_since(start) / 1e9);
    }
    return best;
  };
  const double upload_copies = upload_gbps(loaded, payload_bytes, Upload::kPerPiece, DType::kF32);
  const double upload_scatter = upload_gbps(loaded, payload_bytes, Upload::kScatter, DType::kF32);
  const double upload_scatter_bf16 = upload_gbps(loaded_bf16, payload_bytes / 2, Upload::kScatter, DType::kBF16);
  const double raw_pageable = raw_gbps([&](size_t i) { return pages.payloads[i].data(); });
  std::printf("%-6s %14s %14.2f %8.2f  (raw: cudaMemcpy H2D of f32 pages from pinned; ratio = pinned store / raw)\n",
              "raw", "", raw_pinned, *pinned_gbps / raw_pinned);
  std::printf("%-6s %14s %14s %8.2f  (ratio = one-launch scatter store / raw pinned; beside: %.2f)\n", "", "", "",
              *scatter_gbps / raw_pinned, *beside_gbps / raw_pinned);
  std::printf("%-6s %14s %14.2f %8.2f  (uploads alone from the slabs: %zu copies/page; ratio = / raw pinned)\n",
              "up", "", upload_copies, upload_copies / raw_pinned, copies_per_page);
  std::printf("%-6s %14s %14.2f %8.2f  (uploads alone: one scatter launch/page, f32 pages)\n", "upscat", "",
              upload_scatter, upload_scatter / raw_pinned);
  std::printf("%-6s %14s %14.2f %8.2f  (uploads alone: one scatter launch/page, bf16 pages: %.0f us/page)\n",
              "upsc16", "", upload_scatter_bf16, upload_scatter_bf16 / raw_pinned,
              static_cast<double>(payload_bytes / 2) / (upload_scatter_bf16 * 1e3));
  std::printf("%-6s %14s %14.2f %8.2f  (raw: cudaMemcpy H2D from pageable; ratio = plain store / raw)\n", "raw", "",
              raw_pageable, *plain_gbps / raw_pageable);
  out["device"]["raw_pinned_gbps"] = raw_pinned;
  out["device"]["raw_pageable_gbps"] = raw_pageable;
  out["device"]["upload_copies_gbps"] = upload_copies;
  out["device"]["upload_scatter_gbps"] = upload_scatter;
  out["device"]["upload_scatter_bf16_gbps"] = upload_scatter_bf16;
#endif
  return {};
}

Result<void> run(int argc, char** argv) {
  auto flags = parse_tool_flags(argc, argv, {"--page-mib", "--pages", "--dir", "--device", "--copies-per-page"});
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
  auto host_beside_gbps = store_load_gbps(**host_store, pages, image_bytes, BodyCheck::kBeside);
  if (!host_beside_gbps.ok()) return host_beside_gbps.error();
  // The raw medium: copying every page's bytes out of host memory once (the working set is far
  // larger than the caches, as the store's is).
  std::vector<uint8_t> dst(payload_bytes);
  std::memcpy(dst.data(), pages.payloads[0].data(), payload_bytes);  // fault the destination in
  const auto copy_start = std::chrono::steady_clock::now();
  for (const auto& payload : pages.payloads) std::memcpy(dst.data(), payload.data(), payload.size());
  const double memcpy_gbps =
      static_cast<double>(payload_bytes) * static_cast<double>(num_pages) / seconds_since(copy_start) / 1e9;
  std::printf("%-6s %14.2f %14.2f %8.2f  (raw: memcpy)\n", "host", *host_gbps, memcpy_gbps, *host_gbps / memcpy_gbps);
  std::printf("%-6s %14.2f %14s %8.2f  (body checks on the store's verify threads, as the engine loads)\n", "hostvb",
              *host_beside_gbps, "", *host_beside_gbps / memcpy_gbps);
  out["host"] = {{"store_gbps", *host_gbps}, {"store_beside_gbps", *host_beside_gbps}, {"memcpy_gbps", memcpy_gbps}};
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
  if (flags->count("--device")) {
    const size_t copies = flags->count("--copies-per-page") ? std::stoul(flags->at("--copies-per-page")) : 64;
    auto device = run_device(flags->at("--device"), pages, image_bytes, std::max<size_t>(copies, 1), out);
    if (!device.ok()) return device.error();
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
