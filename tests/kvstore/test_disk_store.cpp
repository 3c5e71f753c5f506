// The disk tier through KvStore: pages survive a reopen (index rebuilt from headers), torn,
// truncated, bit-flipped and zeroed files are misses (counted, deleted, never loaded), a writer
// killed between a page's write and its rename leaves a miss and a temporary file start-up
// deletes, an unusable directory degrades to misses, capacity eviction, rewrites of pages another
// process evicted, TTL across a restart, a writer killed with SIGKILL mid-stream, and concurrent
// readers and writers.
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/stat.h>

#include <atomic>
#include <csignal>
#include <cstddef>
#include <cstring>
#include <fstream>
#include <thread>

#include "kvstore/disk_tier.h"
#include "kvstore_test_util.h"

namespace deepinfer {
namespace {

using testing::make_chain;
using testing::open_store;
using testing::requests_of;
using testing::TempDir;
using testing::to_write;

constexpr int32_t kTokens = 16;
constexpr size_t kPayload = 2048;

KvStoreConfig disk_config(const std::string& dir) { return testing::tier_only_config(dir); }

void write_all(KvStore& store, const std::vector<testing::TestPage>& pages) {
  for (const auto& page : pages) ASSERT_TRUE(store.enqueue_write(to_write(page)));
  store.flush();
}

void expect_payloads(const std::vector<LoadedPage>& loaded, const std::vector<testing::TestPage>& pages) {
  ASSERT_LE(loaded.size(), pages.size());
  for (size_t i = 0; i < loaded.size(); ++i) {
    EXPECT_EQ(std::vector<uint8_t>(loaded[i].payload.begin(), loaded[i].payload.end()), pages[i].payload) << i;
  }
}

std::string page_file(const std::string& dir, const BlockHash& hash) { return disk_page_path(dir, hash); }

size_t count_files(const std::string& dir) {
  size_t files = 0;
  for (const auto& e : std::filesystem::recursive_directory_iterator(dir)) files += e.is_regular_file();
  return files;
}

// XORs mask into the byte at offset (from the end when negative).
void flip_byte(const std::string& path, std::streamoff offset, char mask) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  const auto from = offset < 0 ? std::ios::end : std::ios::beg;
  f.seekg(offset, from);
  char c = 0;
  f.read(&c, 1);
  c = static_cast<char>(c ^ mask);
  f.seekp(offset, from);
  f.write(&c, 1);
}

TEST(DiskStore, PagesSurviveAReopen) {
  TempDir dir;
  const auto pages = make_chain(5, kTokens, kPayload);
  write_all(*open_store(disk_config(dir.path())), pages);
  auto store = open_store(disk_config(dir.path()));
  const auto loaded = store->load_chain(requests_of(pages), kPayload, 1.0);
  ASSERT_EQ(loaded.size(), 5u);
  expect_payloads(loaded, pages);
  EXPECT_EQ(store->stats().tiers.at(0).num_pages, 5);
  EXPECT_EQ(store->stats().tiers.at(0).hits, 5);
}

TEST(DiskStore, TheChainStopsAtTheFirstMissingPage) {
  TempDir dir;
  auto pages = make_chain(4, kTokens, kPayload);
  auto store = open_store(disk_config(dir.path()));
  write_all(*store, {pages[0], pages[1], pages[3]});
  EXPECT_EQ(store->load_chain(requests_of(pages), kPayload, 1.0).size(), 2u);
}

// Each corruption of page 2's file: pages 0-1 load, page 2 is a miss counted as a checksum
// failure, its file is deleted, and nothing after it loads.
TEST(DiskStore, CorruptedPagesAreMissesNeverLoaded) {
  const std::vector<std::pair<std::string, std::function<void(const std::string&)>>> corruptions = {
      {"truncate", [](const std::string& path) { std::filesystem::resize_file(path, std::filesystem::file_size(path) - 100); }},
      {"flip payload bit", [](const std::string& path) { flip_byte(path, -5, 0x01); }},
      {"flip token bit", [](const std::string& path) { flip_byte(path, sizeof(PageHeader) + 9, 0x04); }},
      {"flip header bit", [](const std::string& path) { flip_byte(path, offsetof(PageHeader, created_unix_s), 0x02); }},
      // A torn write that kept the size: the file system extended the file but its last blocks
      // never reached the disk.
      {"zero-filled tail",
       [](const std::string& path) {
         std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
         const std::vector<char> zeros(1000, 0);
         f.seekp(-static_cast<std::streamoff>(zeros.size()), std::ios::end);
         f.write(zeros.data(), static_cast<std::streamsize>(zeros.size()));
       }},
      {"zero header",
       [](const std::string& path) {
         std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
         const std::vector<char> zeros(sizeof(PageHeader), 0);
         f.write(zeros.data(), static_cast<std::streamsize>(zeros.size()));
       }},
  };
  for (const auto& [name, corrupt] : corruptions) {
    SCOPED_TRACE(name);
    TempDir dir;
    const auto pages = make_chain(4, kTokens, kPayload);
    auto store = open_store(disk_config(dir.path()));
    write_all(*store, pages);
    const std::string path = page_file(dir.path(), pages[2].request.hash);
    corrupt(path);
    // Live store (index built before the damage): caught on load by the checksum.
    auto loaded = store->load_chain(requests_of(pages), kPayload, 1.0);
    EXPECT_EQ(loaded.size(), 2u);
    expect_payloads(loaded, pages);
    const KvStoreStats stats = store->stats();
    EXPECT_EQ(stats.tiers.at(0).checksum_failures, 1);
    EXPECT_FALSE(std::filesystem::exists(path));
    // Damage page 1 too and restart: the rebuild drops what its header check catches; the load
    // catches the rest. Either way only page 0 loads.
    store.reset();
    corrupt(page_file(dir.path(), pages[1].request.hash));
    auto reopened = open_store(disk_config(dir.path()));
    loaded = reopened->load_chain(requests_of(pages), kPayload, 1.0);
    EXPECT_EQ(loaded.size(), 1u);
    expect_payloads(loaded, pages);
  }
}

TEST(DiskStore, ATornTempFileIsIgnored) {
  TempDir dir;
  const auto pages = make_chain(2, kTokens, kPayload);
  write_all(*open_store(disk_config(dir.path())), pages);
  // A writer killed between write and rename leaves only a temp file. One of another host (a
  // shared mount), whose writer may be alive, is kept until it is 10 minutes old.
  const std::string other_host = dir.path() + "/tmp/0123456789abcdef.12345.0.tmp";
  std::ofstream(other_host) << "half a page";
  auto store = open_store(disk_config(dir.path()));
  EXPECT_EQ(store->load_chain(requests_of(pages), kPayload, 1.0).size(), 2u);
  EXPECT_TRUE(std::filesystem::exists(other_host));
}

// The child (child_main.cpp) writes pages 0-2 whole, then page 3 up to its fsync, and is killed
// before the rename: page 3 lies whole under its temporary name. The restart never reads it (a
// miss), deletes it (its writer is dead), and loads pages 0-2.
TEST(DiskStore, AWriterKilledBetweenWriteAndRenameLeavesAMiss) {
  TempDir dir;
  const int status = testing::run_child({{"DIKV_CHILD", "rename_crash"}, {"DIKV_DIR", dir.path()}});
  ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << "status " << status;
  const auto pages = make_chain(testing::kRenameCrashPages, kTokens, kPayload, 7);
  ASSERT_EQ(count_files(dir.path() + "/tmp"), 1u);
  for (const auto& e : std::filesystem::directory_iterator(dir.path() + "/tmp")) {
    EXPECT_EQ(e.file_size(), page_image_bytes(kTokens, kPayload));
  }
  EXPECT_FALSE(std::filesystem::exists(page_file(dir.path(), pages.back().request.hash)));
  auto store = open_store(disk_config(dir.path()));
  EXPECT_EQ(count_files(dir.path() + "/tmp"), 0u);
  const auto loaded = store->load_chain(requests_of(pages), kPayload, 1.0);
  EXPECT_EQ(loaded.size(), pages.size() - 1);
  expect_payloads(loaded, pages);
  EXPECT_EQ(store->stats().tiers.at(0).checksum_failures, 0);
  EXPECT_EQ(store->stats().tiers.at(0).num_pages, testing::kRenameCrashPages - 1);
}

// wait_written returns once the given pages are written, whatever else is queued: a page behind
// many others loads as soon as it returns; hashes nothing queued return at once.
TEST(DiskStore, WaitWrittenWaitsForThePagesGiven) {
  TempDir dir;
  auto store = open_store(disk_config(dir.path()));
  const auto pages = make_chain(40, kTokens, kPayload);
  for (const auto& page : pages) ASSERT_TRUE(store->enqueue_write(to_write(page)));
  const std::vector<BlockHash> last{pages.back().request.hash};
  store->wait_written(last);
  EXPECT_TRUE(store->contains_local(pages.back().request.hash));
  store->wait_written(std::vector<BlockHash>{});
  const auto others = make_chain(1, kTokens, kPayload, /*seed=*/99);
  store->wait_written(std::vector<BlockHash>{others[0].request.hash});  // never queued
  EXPECT_FALSE(store->contains_local(others[0].request.hash));
  store->flush();
  EXPECT_EQ(store->load_chain(requests_of(pages), kPayload, 1.0).size(), pages.size());
}

TEST(DiskStore, AFullDiskDegradesToMisses) {
  TempDir dir;
  auto store = open_store(disk_config(dir.path()));
  const auto pages = make_chain(3, kTokens, kPayload);
  // A file-size limit below one page makes every page write fail with EFBIG, as a full disk
  // fails with ENOSPC (the signal it would raise is ignored, as a server would).
  rlimit old_limit{};
  ::getrlimit(RLIMIT_FSIZE, &old_limit);
  const auto old_handler = std::signal(SIGXFSZ, SIG_IGN);
  rlimit small = old_limit;
  small.rlim_cur = 1000;
  ::setrlimit(RLIMIT_FSIZE, &small);
  for (const auto& page : pages) store->enqueue_write(to_write(page));
  store->flush();
  ::setrlimit(RLIMIT_FSIZE, &old_limit);
  std::signal(SIGXFSZ, old_handler);
  EXPECT_TRUE(store->load_chain(requests_of(pages), kPayload, 1.0).empty());
  EXPECT_EQ(store->stats().tiers.at(0).errors, 3);
  EXPECT_EQ(store->stats().tiers.at(0).pages_written, 0);
  // No temp file is left behind.
  EXPECT_TRUE(std::filesystem::is_empty(dir.path() + "/tmp"));
}

TEST(DiskStore, MissingDirectoryParentDegradesToMisses) {
  TempDir dir;
  std::ofstream(dir.path() + "/file") << "not a directory";
  auto store = open_store(disk_config(dir.path() + "/file/store"));
  const auto pages = make_chain(2, kTokens, kPayload);
  write_all(*store, pages);
  EXPECT_TRUE(store->load_chain(requests_of(pages), kPayload, 1.0).empty());
  EXPECT_GT(store->stats().tiers.at(0).errors, 0);
}

TEST(DiskStore, CapacityKeepsReusedPagesOverOneOffPages) {
  TempDir dir;
  KvStoreConfig config = disk_config(dir.path());
  const size_t image = page_image_bytes(kTokens, kPayload);
  config.disk_bytes = static_cast<int64_t>(image * 6);
  auto store = open_store(config);
  const auto hot = make_chain(3, kTokens, kPayload, 1);
  write_all(*store, hot);
  ASSERT_EQ(store->load_chain(requests_of(hot), kPayload, 1.0).size(), 3u);  // now protected
  const auto cold = make_chain(8, kTokens, kPayload, 2);
  write_all(*store, cold);
  const TierStats stats = store->stats().tiers.at(0);
  EXPECT_LE(stats.used_bytes, config.disk_bytes);
  EXPECT_EQ(stats.evictions, 5);
  EXPECT_EQ(store->load_chain(requests_of(hot), kPayload, 1.0).size(), 3u);
  // Of the one-off chain only the newest pages remain; its head is gone, so it no longer hits.
  EXPECT_TRUE(store->load_chain(requests_of(cold), kPayload, 1.0).empty());
  // The disk holds exactly the indexed pages.
  EXPECT_EQ(count_files(dir.path() + "/pages"), 6u);
}

// Two processes share a directory, each with room for 4 pages. Each cycle B, opened after A
// wrote its chain, indexes A's pages at start-up and evicts them to make room for its own; A then
// writes its chain again, which its index still holds (a rewrite, as when two requests store one
// prefix). A must store the files again: its index and the directory agree, its chain loads, and
// the directory stays bounded by the two capacities.
TEST(DiskStore, RewritesOfPagesAnotherProcessEvictedStoreThemAgain) {
  TempDir dir;
  KvStoreConfig config = disk_config(dir.path());
  config.disk_bytes = static_cast<int64_t>(page_image_bytes(kTokens, kPayload) * 4);
  auto a = open_store(config);
  const auto mine = make_chain(4, kTokens, kPayload, 1);
  const auto theirs = make_chain(4, kTokens, kPayload, 2);
  write_all(*a, mine);
  for (int cycle = 0; cycle < 3; ++cycle) {
    SCOPED_TRACE("cycle " + std::to_string(cycle));
    {
      auto b = open_store(config);
      write_all(*b, theirs);
      EXPECT_EQ(b->load_chain(requests_of(theirs), kPayload, 1.0).size(), 4u);
    }
    write_all(*a, mine);
    for (const auto& page : mine) EXPECT_TRUE(std::filesystem::exists(page_file(dir.path(), page.request.hash)));
    EXPECT_EQ(a->stats().tiers.at(0).num_pages, 4);
    EXPECT_EQ(a->load_chain(requests_of(mine), kPayload, 1.0).size(), 4u);
    EXPECT_LE(count_files(dir.path() + "/pages"), 8u);
  }
  EXPECT_EQ(a->stats().tiers.at(0).checksum_failures, 0);
}

TEST(DiskStore, TtlSurvivesARestartAndHitsRefreshIt) {
  TempDir dir;
  int64_t now = 1'000'000;
  KvStoreConfig config = disk_config(dir.path());
  config.retention.clock = [&] { return now; };
  config.retention.default_ttl_s = 100;
  const auto pages = make_chain(2, kTokens, kPayload);
  write_all(*open_store(config), pages);
  now += 90;
  {
    auto store = open_store(config);
    ASSERT_EQ(store->load_chain({pages[0].request}, kPayload, 1.0).size(), 1u);  // page 0 refreshed at +90
  }
  now += 20;  // +110: page 1 (last used at +0) is past its TTL, page 0 is not
  auto store = open_store(config);
  EXPECT_EQ(store->stats().tiers.at(0).num_pages, 1);
  EXPECT_EQ(store->stats().tiers.at(0).expirations, 1);
  EXPECT_EQ(store->load_chain(requests_of(pages), kPayload, 1.0).size(), 1u);
}

TEST(DiskStore, AWriterKilledMidStreamLeavesOnlyWholePages) {
  TempDir dir;
  const pid_t pid = testing::spawn_process({"/proc/self/exe"}, {{"DIKV_CHILD", "page_writer"}, {"DIKV_DIR", dir.path()}});
  ASSERT_GT(pid, 0);
  // Kill it once it has written a few pages and is still writing.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  size_t num_files = 0;
  while (std::chrono::steady_clock::now() < deadline && num_files < 20) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    num_files = 0;
    std::error_code ec;
    for (const auto& e : std::filesystem::recursive_directory_iterator(dir.path() + "/pages", ec)) num_files += e.is_regular_file();
  }
  ::kill(pid, SIGKILL);
  int status = 0;
  ::waitpid(pid, &status, 0);
  ASSERT_TRUE(WIFSIGNALED(status)) << "the writer exited on its own";
  ASSERT_GE(num_files, 20u);
  // The writer's chain is make_chain(kChildPages, ...); every page present verifies.
  auto store = open_store(disk_config(dir.path()));
  const auto pages = make_chain(testing::kChildPages, kTokens, kPayload, 7);
  const auto loaded = store->load_chain(requests_of(pages), kPayload, 1.0);
  EXPECT_GE(loaded.size(), 20u);
  expect_payloads(loaded, pages);
  EXPECT_EQ(store->stats().tiers.at(0).checksum_failures, 0);
}

TEST(DiskStore, ConcurrentReadersAndWritersNeverSeeWrongBytes) {
  TempDir dir;
  // Two stores on one directory stand in for two processes; each writes its own chains while
  // reader threads on both load all chains.
  auto a = open_store(disk_config(dir.path()));
  auto b = open_store(disk_config(dir.path()));
  std::vector<std::vector<testing::TestPage>> chains;
  for (uint32_t seed = 10; seed < 16; ++seed) chains.push_back(make_chain(6, kTokens, kPayload, seed));
  std::atomic<bool> done{false};
  std::atomic<int64_t> loaded_pages{0};
  auto reader = [&](KvStore& store) {
    while (!done) {
      for (const auto& chain : chains) {
        const auto loaded = store.load_chain(requests_of(chain), kPayload, 1.0);
        for (size_t i = 0; i < loaded.size(); ++i) {
          ASSERT_EQ(std::memcmp(loaded[i].payload.data(), chain[i].payload.data(), kPayload), 0);
        }
        loaded_pages += static_cast<int64_t>(loaded.size());
      }
    }
  };
  std::thread r1(reader, std::ref(*a)), r2(reader, std::ref(*b));
  for (size_t c = 0; c < chains.size(); ++c) {
    KvStore& writer = c % 2 == 0 ? *a : *b;
    for (const auto& page : chains[c]) writer.enqueue_write(to_write(page));
  }
  a->flush();
  b->flush();
  done = true;
  r1.join();
  r2.join();
  for (const auto& chain : chains) EXPECT_EQ(a->load_chain(requests_of(chain), kPayload, 1.0).size(), 6u);
  for (const auto& chain : chains) EXPECT_EQ(b->load_chain(requests_of(chain), kPayload, 1.0).size(), 6u);
  EXPECT_EQ(a->stats().tiers.at(0).checksum_failures + b->stats().tiers.at(0).checksum_failures, 0);
}

TEST(DiskStore, AFullWriteQueueDropsAndCounts) {
  TempDir dir;
  KvStoreConfig config = disk_config(dir.path());
  config.write_queue_pages = 2;
  auto store = open_store(config);
  const auto pages = make_chain(200, kTokens, kPayload);
  int64_t accepted = 0;
  for (const auto& page : pages) accepted += store->enqueue_write(to_write(page));
  store->flush();
  const KvStoreStats stats = store->stats();
  EXPECT_EQ(stats.pages_queued, accepted);
  EXPECT_EQ(stats.queue_drops, 200 - accepted);
  EXPECT_GT(stats.queue_drops, 0);
}

TEST(DiskStore, TheCostGuardSkipsPagesSlowerThanRecompute) {
  TempDir dir;
  KvStoreConfig config = disk_config(dir.path());
  config.cost_guard = true;
  auto store = open_store(config);
  const auto pages = make_chain(3, kTokens, kPayload);
  write_all(*store, pages);
  ASSERT_EQ(store->tier_costs().size(), 1u);
  EXPECT_GT(store->tier_costs()[0].bytes_per_s, 0.0);
  // Recomputing a page in 1 ns beats any disk read; in 10 s loses to it.
  EXPECT_TRUE(store->load_chain(requests_of(pages), kPayload, 1e-9).empty());
  EXPECT_EQ(store->stats().loads_skipped_by_cost, 1);
  EXPECT_EQ(store->load_chain(requests_of(pages), kPayload, 10.0).size(), 3u);
}

TEST(DiskStore, HostTierPromotesDiskHits) {
  TempDir dir;
  const auto pages = make_chain(3, kTokens, kPayload);
  write_all(*open_store(disk_config(dir.path())), pages);
  KvStoreConfig config = disk_config(dir.path());
  config.host_bytes = 1 << 20;
  auto store = open_store(config);
  auto loaded = store->load_chain(requests_of(pages), kPayload, 1.0);
  ASSERT_EQ(loaded.size(), 3u);
  EXPECT_EQ(loaded[0].tier, 1);
  loaded = store->load_chain(requests_of(pages), kPayload, 1.0);
  ASSERT_EQ(loaded.size(), 3u);
  EXPECT_EQ(loaded[0].tier, 0);
  expect_payloads(loaded, pages);
  EXPECT_EQ(store->stats().tiers.at(0).hits, 3);
}

}  // namespace
}  // namespace deepinfer
