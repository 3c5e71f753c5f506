// The Redis tier against a real redis-server on loopback: pages written by one store are read
// by another (two engines on two machines), corrupt values are misses, and a server killed
// mid-run turns into misses and dropped writes, never an error or a hang.
#include <gtest/gtest.h>
#include <hiredis/hiredis.h>

#include "kvstore/redis_tier.h"
#include "kvstore_test_util.h"

namespace deepinfer {
namespace {

using testing::make_chain;
using testing::open_store;
using testing::requests_of;
using testing::to_write;

constexpr int32_t kTokens = 16;
constexpr size_t kPayload = 4096;

KvStoreConfig redis_config(const std::string& url) { return testing::tier_only_config("", url); }

TEST(RedisStore, ParsesBackendUrls) {
  auto address = parse_redis_url("redis://10.0.0.5:7000");
  ASSERT_TRUE(address.ok());
  EXPECT_EQ(address->host, "10.0.0.5");
  EXPECT_EQ(address->port, 7000);
  EXPECT_EQ(parse_redis_url("redis://cache").value().port, 6379);
  EXPECT_FALSE(parse_redis_url("http://cache:1").ok());
  EXPECT_FALSE(parse_redis_url("redis://cache:99999").ok());
  EXPECT_FALSE(parse_redis_url("redis://:80").ok());
  EXPECT_FALSE(KvStore::open(redis_config("redis://host:notaport"), "x").ok());
  KvStoreConfig bad;
  bad.backend = "s3";
  bad.dir = "/tmp/x";
  EXPECT_FALSE(KvStore::open(bad, "x").ok());
}

TEST(RedisStore, AnotherStoreReadsWhatOneWrote) {
  testing::RedisServer server;
  ASSERT_TRUE(server.ready());
  const auto pages = make_chain(4, kTokens, kPayload);
  {
    auto writer = open_store(redis_config(server.url()));
    for (const auto& page : pages) ASSERT_TRUE(writer->enqueue_write(to_write(page, TrafficClass::kChat)));
    writer->flush();
    EXPECT_EQ(writer->stats().tiers.at(0).pages_written, 4);
  }
  auto reader = open_store(redis_config(server.url()));
  const auto loaded = reader->load_chain(requests_of(pages), kPayload, 1.0);
  ASSERT_EQ(loaded.size(), 4u);
  for (size_t i = 0; i < loaded.size(); ++i) {
    EXPECT_EQ(std::vector<uint8_t>(loaded[i].payload.begin(), loaded[i].payload.end()), pages[i].payload);
  }
  EXPECT_GT(reader->tier_costs().at(0).bytes_per_s, 0.0);
  // The key carries the chat TTL (7 days), refreshed by the hit.
  redisContext* c = redisConnect("127.0.0.1", std::stoi(server.url().substr(server.url().rfind(':') + 1)));
  ASSERT_TRUE(c != nullptr && c->err == 0);
  const std::string key = "dikv:" + hash_hex(pages[0].request.hash);
  auto* ttl = static_cast<redisReply*>(redisCommand(c, "TTL %s", key.c_str()));
  ASSERT_NE(ttl, nullptr);
  EXPECT_GT(ttl->integer, 7 * 24 * 3600 - 60);
  freeReplyObject(ttl);
  // Corrupt page 1's value: it becomes a miss and is deleted.
  auto* set = static_cast<redisReply*>(redisCommand(c, "SETRANGE dikv:%s 200 XYZ", hash_hex(pages[1].request.hash).c_str()));
  freeReplyObject(set);
  EXPECT_EQ(reader->load_chain(requests_of(pages), kPayload, 1.0).size(), 1u);
  EXPECT_EQ(reader->stats().tiers.at(0).checksum_failures, 1);
  auto* exists = static_cast<redisReply*>(redisCommand(c, "EXISTS dikv:%s", hash_hex(pages[1].request.hash).c_str()));
  EXPECT_EQ(exists->integer, 0);
  freeReplyObject(exists);
  redisFree(c);
}

TEST(RedisStore, AServerKilledMidRunDegradesToMisses) {
  testing::RedisServer server;
  ASSERT_TRUE(server.ready());
  const auto pages = make_chain(3, kTokens, kPayload);
  auto store = open_store(redis_config(server.url()));
  for (const auto& page : pages) store->enqueue_write(to_write(page));
  store->flush();
  ASSERT_EQ(store->load_chain(requests_of(pages), kPayload, 1.0).size(), 3u);
  server.kill();
  EXPECT_TRUE(store->load_chain(requests_of(pages), kPayload, 1.0).empty());
  const auto more = make_chain(3, kTokens, kPayload, 9);
  for (const auto& page : more) store->enqueue_write(to_write(page));
  store->flush();
  const KvStoreStats stats = store->stats();
  EXPECT_GT(stats.tiers.at(0).errors, 0);
  EXPECT_EQ(stats.tiers.at(0).pages_written, 3);
}

TEST(RedisStore, NoServerAtAllIsOnlyMisses) {
  auto store = open_store(redis_config("redis://127.0.0.1:" + std::to_string(testing::free_loopback_port())));
  const auto pages = make_chain(2, kTokens, kPayload);
  for (const auto& page : pages) store->enqueue_write(to_write(page));
  store->flush();
  EXPECT_TRUE(store->load_chain(requests_of(pages), kPayload, 1.0).empty());
  EXPECT_GT(store->stats().tiers.at(0).errors, 0);
}

TEST(RedisStore, DiskAndRedisTogetherFallBackToRedis) {
  testing::RedisServer server;
  ASSERT_TRUE(server.ready());
  testing::TempDir dir_a, dir_b;
  const auto pages = make_chain(3, kTokens, kPayload);
  KvStoreConfig a = redis_config(server.url());
  a.dir = dir_a.path();
  auto writer = open_store(a);
  for (const auto& page : pages) writer->enqueue_write(to_write(page));
  writer->flush();
  // Another machine: its own empty disk, the same Redis.
  KvStoreConfig b = redis_config(server.url());
  b.dir = dir_b.path();
  b.host_bytes = 1 << 20;
  auto reader = open_store(b);
  const auto loaded = reader->load_chain(requests_of(pages), kPayload, 1.0);
  ASSERT_EQ(loaded.size(), 3u);
  EXPECT_EQ(loaded[0].tier, 2);  // host, disk, redis
  EXPECT_EQ(reader->stats().tiers.at(1).misses, 3);
}

}  // namespace
}  // namespace deepinfer
