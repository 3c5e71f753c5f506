// Helpers for the kvstore tests: temporary directories, synthetic pages, a real redis-server on
// a free loopback port, and child processes (this test binary re-run in a child mode, see
// child_main.cpp) for the restart and kill -9 tests.
#pragma once

#include <gtest/gtest.h>
#include <hiredis/hiredis.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "redis_server.h"
#include "engine/kv_offload.h"
#include "kvstore/kv_store.h"
#include "kvstore/page_format.h"

extern char** environ;

namespace deepinfer::testing {

class TempDir {
 public:
  TempDir() {
    std::string pattern = (std::filesystem::temp_directory_path() / "dikv-test-XXXXXX").string();
    path_ = ::mkdtemp(pattern.data());
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::permissions(path_, std::filesystem::perms::owner_all, ec);
    std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// Page i of a synthetic chain: hash = chain over tokens seeded by "test", tokens and payload
// derived from i and seed.
struct TestPage {
  PageRequest request;
  std::vector<uint8_t> payload;
};

// A store with the host tier off and the load-or-recompute check off, so every lookup reaches
// the tier under test. backend: "disk" (in dir) or a redis:// URL.
inline KvStoreConfig tier_only_config(const std::string& dir, const std::string& backend = "disk") {
  KvStoreConfig config;
  config.dir = dir;
  config.backend = backend;
  config.host_bytes = 0;
  config.cost_guard = false;
  return config;
}

inline std::unique_ptr<KvStore> open_store(const KvStoreConfig& config) {
  auto store = KvStore::open(config, "test-layout");
  EXPECT_TRUE(store.ok()) << store.error().message;
  return std::move(*store);
}

inline std::vector<TestPage> make_chain(int32_t num_pages, int32_t page_tokens, size_t payload_bytes,
                                        uint32_t seed = 1) {
  std::vector<TestPage> pages;
  BlockHash hash = prefix_root_hash("test-model", std::to_string(seed));
  for (int32_t i = 0; i < num_pages; ++i) {
    TestPage page;
    for (int32_t t = 0; t < page_tokens; ++t) page.request.token_ids.push_back(static_cast<int32_t>((i * 131 + t * 7 + seed) % 1000));
    hash = chain_block_hash(hash, page.request.token_ids.data(), page_tokens, {});
    page.request.hash = hash;
    page.request.page_index = i;
    page.payload.resize(payload_bytes);
    for (size_t b = 0; b < payload_bytes; ++b) page.payload[b] = static_cast<uint8_t>((b * 31 + static_cast<size_t>(i) * 17 + seed) & 0xff);
    pages.push_back(std::move(page));
  }
  return pages;
}

struct StoredPage {
  std::string path;
  std::optional<PageHeader> header;  // nullopt when the file's header does not parse
};

// Every page file a disk store keeps under dir/pages, with its parsed header.
inline std::vector<StoredPage> stored_pages(const std::string& dir) {
  std::vector<StoredPage> pages;
  for (const auto& e : std::filesystem::recursive_directory_iterator(dir + "/pages")) {
    if (!e.is_regular_file()) continue;
    std::ifstream in(e.path(), std::ios::binary);
    std::vector<uint8_t> header(sizeof(PageHeader));
    in.read(reinterpret_cast<char*>(header.data()), static_cast<std::streamsize>(header.size()));
    auto parsed = parse_page_header(header, e.file_size());
    pages.push_back({e.path().string(), parsed.ok() ? std::optional<PageHeader>(*parsed) : std::nullopt});
  }
  return pages;
}

// XORs mask into a file's last byte: in a stored page, the top byte of its last value (the last
// layer's V block), so a float32 or bf16 value changes by orders of magnitude.
inline void flip_last_byte(const std::string& path, char mask = 0x40) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(-1, std::ios::end);
  char c = 0;
  f.read(&c, 1);
  c = static_cast<char>(c ^ mask);
  f.seekp(-1, std::ios::end);
  f.write(&c, 1);
}

inline PageWrite to_write(const TestPage& page, TrafficClass traffic_class = TrafficClass::kDefault) {
  return PageWrite{page.request.hash, page.request.page_index, page.request.token_ids, page.payload, traffic_class,
                   nullptr};
}

// The image a store opened with open_store writes for page.
inline SharedPage stored_image_of(const TestPage& page) {
  const PageIdentity identity{page.request.hash, layout_id_of("test-layout"), page.request.page_index,
                              page.request.token_ids};
  return encode_page(PageContent{identity, TrafficClass::kDefault, 0, page.payload}, default_host_allocator());
}

inline std::vector<PageRequest> requests_of(const std::vector<TestPage>& pages) {
  std::vector<PageRequest> requests;
  for (const TestPage& page : pages) requests.push_back(page.request);
  return requests;
}

// The engine's store hook alone over model's cache (16 blocks of block_size), for its start-up
// measurements (prefill speed, the host tier's load cost) without an engine around it.
struct StandaloneOffload {
  std::unique_ptr<KvCacheManager> kv;
  std::unique_ptr<KvOffload> offload;
};

inline StandaloneOffload open_offload(CausalLM& model, const KvStoreConfig& config, int32_t block_size) {
  model.allocate_kv_cache(KvCacheShape{16, block_size});
  KvCacheConfig kv_config;
  kv_config.num_blocks = 16;
  kv_config.block_size = block_size;
  kv_config.model_fingerprint = "probe";
  StandaloneOffload s;
  s.kv = std::make_unique<KvCacheManager>(kv_config);
  auto offload = KvOffload::create(model, *s.kv, config, kv_config.model_fingerprint, block_size, 256);
  EXPECT_TRUE(offload.ok()) << (offload.ok() ? std::string() : offload.error().message);
  if (offload.ok()) s.offload = std::move(*offload);
  return s;
}

// The page_writer child (child_main.cpp) writes make_chain(kChildPages, 16, 2048, 7), slowly.
inline constexpr int32_t kChildPages = 2000;
// The rename_crash child writes the first kRenameCrashPages - 1 pages of make_chain(kRenameCrashPages,
// 16, 2048, 7), then the last one up to its fsync, and is killed before its rename.
inline constexpr int32_t kRenameCrashPages = 4;

// Re-runs this test binary in a child mode (child_main.cpp) and waits; returns its wait status.
inline int run_child(const std::map<std::string, std::string>& env) {
  const pid_t pid = spawn_process({"/proc/self/exe"}, env);
  int status = 0;
  if (pid < 0 || ::waitpid(pid, &status, 0) != pid) return -1;
  return status;
}

}  // namespace deepinfer::testing
