// The worker registry against a real redis-server on loopback: a worker's heartbeat lists it with
// its load, a clean stop deletes its key, a silent worker's key expires, an unreachable or
// malformed URL is an error naming it, and a Redis that dies under a running heartbeat or watcher
// is logged, not fatal. Also the record's JSON form.
#include "server/worker_registry.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "redis_server.h"

namespace deepinfer::server {
namespace {

using namespace std::chrono_literals;

WorkerRecord identity(uint16_t port) {
  WorkerRecord record;
  record.host = "127.0.0.1";
  record.port = port;
  record.id = "127.0.0.1:" + std::to_string(port);
  record.model = "tiny";
  record.block_size = 16;
  record.max_model_len = 4096;
  return record;
}

RegistryOptions options(const std::string& url) {
  RegistryOptions o;
  o.url = url;
  o.heartbeat_interval = 50ms;
  o.key_ttl = 1000ms;
  o.poll_interval = 20ms;
  return o;
}

// Polls a watcher's listings until pred holds (or 5 s).
struct Listings {
  std::mutex mutex;
  std::vector<WorkerRecord> last;
  bool wait_for(const std::function<bool(const std::vector<WorkerRecord>&)>& pred) {
    for (auto deadline = std::chrono::steady_clock::now() + 5s; std::chrono::steady_clock::now() < deadline;) {
      {
        std::lock_guard lock(mutex);
        if (pred(last)) return true;
      }
      std::this_thread::sleep_for(10ms);
    }
    return false;
  }
};

TEST(WorkerRecord, RoundTripsAndNamesAMissingField) {
  WorkerRecord r;
  r.id = "127.0.0.1:8001";
  r.host = "127.0.0.1";
  r.port = 8001;
  r.model = "tiny";
  r.block_size = 16;
  r.max_model_len = 4096;
  r.heartbeat = 42;
  r.load = {10, 1, 2, 0.5, 100, 100, 64};
  const nlohmann::json json = worker_record_to_json(r);
  auto back = worker_record_from_json(json);
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(worker_record_to_json(*back), json);
  nlohmann::json broken = json;
  broken.erase("port");
  auto missing = worker_record_from_json(broken);
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.error().message.find("port"), std::string::npos) << missing.error().message;
}

TEST(WorkerRegistry, HeartbeatsListTheWorkerWithItsLoadAndAStopDeletesTheKey) {
  testing::RedisServer redis;
  ASSERT_TRUE(redis.ready());
  Listings listings;
  auto watcher = RegistryWatcher::start(options(redis.url()), [&](const std::vector<WorkerRecord>& records) {
    std::lock_guard lock(listings.mutex);
    listings.last = records;
  });
  ASSERT_TRUE(watcher.ok()) << watcher.error().message;
  std::atomic<int64_t> queued{7};
  auto heartbeat = WorkerHeartbeat::start(options(redis.url()), identity(9001), [&] {
    WorkerLoadReport load;
    load.queued_tokens = queued.load();
    return load;
  });
  ASSERT_TRUE(heartbeat.ok()) << heartbeat.error().message;
  EXPECT_TRUE(listings.wait_for([](const auto& r) { return r.size() == 1 && r[0].load.queued_tokens == 7; }));
  queued = 9;  // the next heartbeat carries the new load, with a newer heartbeat count
  EXPECT_TRUE(listings.wait_for([](const auto& r) { return r.size() == 1 && r[0].load.queued_tokens == 9; }));
  EXPECT_TRUE(listings.wait_for([](const auto& r) { return r.size() == 1 && r[0].heartbeat > 1; }));
  EXPECT_TRUE(listings.wait_for([](const auto& r) { return r.size() == 1 && r[0].id == "127.0.0.1:9001"; }));
  heartbeat->reset();
  EXPECT_TRUE(listings.wait_for([](const auto& r) { return r.empty(); }));
}

TEST(WorkerRegistry, ASilentWorkersKeyExpires) {
  testing::RedisServer redis;
  ASSERT_TRUE(redis.ready());
  RegistryOptions silent = options(redis.url());
  silent.heartbeat_interval = 60s;  // registers once, then says nothing, as a killed worker
  silent.key_ttl = 300ms;
  auto heartbeat = WorkerHeartbeat::start(silent, identity(9002), [] { return WorkerLoadReport{}; });
  ASSERT_TRUE(heartbeat.ok()) << heartbeat.error().message;
  Listings listings;
  auto watcher = RegistryWatcher::start(options(redis.url()), [&](const std::vector<WorkerRecord>& records) {
    std::lock_guard lock(listings.mutex);
    listings.last = records;
  });
  ASSERT_TRUE(watcher.ok());
  EXPECT_TRUE(listings.wait_for([](const auto& r) { return r.size() == 1; }));
  EXPECT_TRUE(listings.wait_for([](const auto& r) { return r.empty(); }));
}

TEST(WorkerRegistry, UnreachableOrMalformedUrlsAreErrorsNamingThem) {
  const std::string url = "redis://127.0.0.1:" + std::to_string(testing::free_loopback_port());
  auto heartbeat = WorkerHeartbeat::start(options(url), identity(9003), [] { return WorkerLoadReport{}; });
  ASSERT_FALSE(heartbeat.ok());
  EXPECT_NE(heartbeat.error().message.find("cannot connect to Redis at " + url), std::string::npos)
      << heartbeat.error().message;
  auto watcher = RegistryWatcher::start(options("http://nope"), [](const auto&) {});
  ASSERT_FALSE(watcher.ok());
  EXPECT_NE(watcher.error().message.find("expected redis://host:port"), std::string::npos) << watcher.error().message;
}

TEST(WorkerRegistry, ARedisOutageIsSurvivedByBothSides) {
  auto redis = std::make_unique<testing::RedisServer>();
  ASSERT_TRUE(redis->ready());
  std::atomic<int> listings{0};
  auto watcher = RegistryWatcher::start(options(redis->url()), [&](const auto&) { ++listings; });
  auto heartbeat = WorkerHeartbeat::start(options(redis->url()), identity(9004), [] { return WorkerLoadReport{}; });
  ASSERT_TRUE(watcher.ok());
  ASSERT_TRUE(heartbeat.ok());
  redis->kill();
  const int before = listings.load();
  std::this_thread::sleep_for(300ms);  // several failed polls and heartbeats, each logged once
  EXPECT_EQ(listings.load(), before);  // a failed poll hands no (empty) listing to the router
  heartbeat->reset();
  watcher->reset();
}

}  // namespace
}  // namespace deepinfer::server
