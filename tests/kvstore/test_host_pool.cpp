// The store's host-memory allocator hook over a slab pool (pinned memory on CUDA; an ordinary
// region here): page images from every tier land in slabs, a full pool falls back to ordinary
// memory and counts it, staged writes (payload written in place, as the device does) give the
// same image as encode_page, and an engine persisting through the pool hits with the same tokens.
#include <gtest/gtest.h>

#include <cstring>

#include "../engine/engine_test_util.h"
#include "kvstore/slab_allocator.h"
#include "kvstore_test_util.h"
#include "runtime/host_slab_pool.h"

namespace deepinfer::testing {
namespace {

constexpr int32_t kTokens = 16;
constexpr size_t kPayload = 4096;
const size_t kImageBytes = page_image_bytes(kTokens, kPayload);

// A slab pool over a vector, counting the reuse hook the CUDA pool waits in.
class VectorPool final : public HostSlabPool {
 public:
  VectorPool(std::vector<uint8_t>& region, size_t slab_bytes) : HostSlabPool(region.data(), region.size(), slab_bytes) {}
  int reuse_checks = 0;

 protected:
  void wait_reusable(size_t /*slab*/) override { reuse_checks++; }
};

struct Pool {
  explicit Pool(size_t num_slabs, size_t slab_bytes = kImageBytes)
      : region((slab_bytes + HostSlabPool::kSlabAlign - 1) / HostSlabPool::kSlabAlign * HostSlabPool::kSlabAlign *
               num_slabs),
        pool(std::make_shared<VectorPool>(region, slab_bytes)) {}
  std::vector<uint8_t> region;  // outlives pool: declared first
  std::shared_ptr<VectorPool> pool;
};

TEST(HostSlabPool, HandsOutEachSlabOnceAndTakesItBack) {
  std::vector<uint8_t> region(1000);
  VectorPool pool(region, 300);  // rounded up to 512: one slab
  EXPECT_EQ(pool.slab_bytes(), 512u);
  EXPECT_EQ(pool.num_slabs(), 1u);
  EXPECT_EQ(pool.take(513), nullptr);  // larger than a slab
  void* slab = pool.take(100);
  ASSERT_NE(slab, nullptr);
  EXPECT_EQ(slab, region.data());
  EXPECT_TRUE(pool.owns(static_cast<uint8_t*>(slab) + 511));
  EXPECT_FALSE(pool.owns(static_cast<uint8_t*>(slab) + 500, 20));  // crosses the slab's end
  EXPECT_FALSE(pool.owns(region.data() + 600));                    // the unused tail
  EXPECT_EQ(pool.take(100), nullptr);                              // exhausted
  EXPECT_EQ(pool.num_free(), 0u);
  pool.give_back(slab);
  EXPECT_EQ(pool.take(512), slab);
  EXPECT_EQ(pool.reuse_checks, 2);  // every hand-out asks whether a device still reads the slab
}

TEST(HostSlabPool, StagedPageEqualsEncodedPage) {
  const auto pages = make_chain(1, kTokens, kPayload);
  PageContent content;
  content.identity = PageIdentity{pages[0].request.hash, 42, 0, pages[0].request.token_ids};
  content.created_unix_s = 1000;
  content.payload = pages[0].payload;
  const SharedPage encoded = encode_page(content, default_host_allocator());
  std::shared_ptr<PageBuffer> staged = allocate_page(kTokens, kPayload, default_host_allocator());
  std::span<uint8_t> region = page_payload_region(*staged, kTokens);
  ASSERT_EQ(region.size(), kPayload);
  std::memcpy(region.data(), pages[0].payload.data(), kPayload);
  content.payload = {};
  const SharedPage sealed = seal_page(staged, content);
  ASSERT_EQ(sealed->size(), encoded->size());
  EXPECT_EQ(std::memcmp(sealed->data(), encoded->data(), encoded->size()), 0);
}

std::vector<uint8_t> payload_of(const LoadedPage& page) { return {page.payload.begin(), page.payload.end()}; }

TEST(HostPoolStore, PagesFromEveryTierLandInSlabsAndDecodeIdentically) {
  RedisServer server;
  ASSERT_TRUE(server.ready());
  TempDir dir;
  const auto pages = make_chain(4, kTokens, kPayload, 3);
  {
    KvStoreConfig config = tier_only_config(dir.path(), server.url());
    auto store = open_store(config);  // fills disk and Redis in ordinary memory
    for (const auto& page : pages) ASSERT_TRUE(store->enqueue_write(to_write(page)));
    store->flush();
  }
  // Each tier alone, and host memory filled by a promotion, through a pool.
  struct Case {
    std::string name;
    KvStoreConfig config;
  };
  std::vector<Case> cases = {{"disk", tier_only_config(dir.path())}, {"redis", tier_only_config("", server.url())}};
  cases.push_back({"host", tier_only_config(dir.path())});
  cases.back().config.host_bytes = int64_t{1} << 20;
  for (Case& c : cases) {
    SCOPED_TRACE(c.name);
    Pool pool(8);
    c.config.host_pool = pool.pool;
    auto store = open_store(c.config);
    auto loaded = store->load_chain(requests_of(pages), kPayload, 1e9);
    if (c.name == "host") loaded = store->load_chain(requests_of(pages), kPayload, 1e9);  // now from host memory
    ASSERT_EQ(loaded.size(), pages.size());
    for (size_t i = 0; i < pages.size(); ++i) {
      EXPECT_EQ(payload_of(loaded[i]), pages[i].payload);
      EXPECT_TRUE(pool.pool->owns(loaded[i].image->data(), loaded[i].image->size()));
    }
    if (c.name == "host") {
      EXPECT_EQ(loaded[0].tier, 0);
      EXPECT_EQ(store->stats().tiers[0].hits, 4);
    }
    EXPECT_EQ(store->stats().host_pool_pages, 4);
    EXPECT_EQ(store->stats().host_pool_fallbacks, 0);
    loaded.clear();
    store.reset();
    EXPECT_EQ(pool.pool->num_free(), pool.pool->num_slabs());  // every image went back
  }
}

TEST(HostPoolStore, AFullPoolFallsBackToOrdinaryMemoryAndCountsIt) {
  Pool pool(2);
  TempDir dir;
  KvStoreConfig config = tier_only_config(dir.path());
  config.host_bytes = int64_t{1} << 20;
  config.host_pool = pool.pool;
  auto store = open_store(config);
  const auto pages = make_chain(5, kTokens, kPayload, 9);
  for (const auto& page : pages) ASSERT_TRUE(store->enqueue_write(to_write(page)));
  store->flush();
  // The host tier keeps all five images: two in slabs, three in ordinary memory.
  const KvStoreStats stats = store->stats();
  EXPECT_EQ(stats.host_pool_pages, 2);
  EXPECT_EQ(stats.host_pool_fallbacks, 3);
  EXPECT_EQ(pool.pool->num_free(), 0u);
  const auto loaded = store->load_chain(requests_of(pages), kPayload, 1e9);
  ASSERT_EQ(loaded.size(), pages.size());
  int in_slabs = 0;
  for (size_t i = 0; i < pages.size(); ++i) {
    EXPECT_EQ(payload_of(loaded[i]), pages[i].payload);
    EXPECT_EQ(loaded[i].tier, 0);
    in_slabs += pool.pool->owns(loaded[i].image->data()) ? 1 : 0;
  }
  EXPECT_EQ(in_slabs, 2);
  // An image larger than a slab never takes one.
  const auto big = make_chain(1, kTokens, kPayload * 2, 11);
  ASSERT_TRUE(store->enqueue_write(to_write(big[0])));
  store->flush();
  EXPECT_EQ(store->stats().host_pool_fallbacks, 4);
}

TEST(HostPoolStore, StagedWritesLoadBack) {
  Pool pool(4);
  TempDir dir;
  KvStoreConfig config = tier_only_config(dir.path());
  config.host_pool = pool.pool;
  auto store = open_store(config);
  const auto pages = make_chain(3, kTokens, kPayload, 5);
  for (const auto& page : pages) {
    PageWrite write{page.request.hash, page.request.page_index, page.request.token_ids, {}, TrafficClass::kDefault, nullptr};
    write.staged = store->stage_page(kTokens, kPayload);
    EXPECT_TRUE(pool.pool->owns(write.staged->data(), write.staged->size()));
    std::memcpy(page_payload_region(*write.staged, kTokens).data(), page.payload.data(), kPayload);
    ASSERT_TRUE(store->enqueue_write(std::move(write)));
  }
  store->flush();
  EXPECT_EQ(pool.pool->num_free(), pool.pool->num_slabs());  // written to disk, slabs back
  const auto loaded = store->load_chain(requests_of(pages), kPayload, 1e9);
  ASSERT_EQ(loaded.size(), pages.size());
  for (size_t i = 0; i < pages.size(); ++i) EXPECT_EQ(payload_of(loaded[i]), pages[i].payload);
}

TEST(HostPoolStore, AnEngineStoresThroughThePoolAndHitsWithTheSameTokens) {
  constexpr int32_t kBlockSize = 16;
  TestModel m = load_test_model("llama", /*batch_invariant=*/true);
  std::vector<int32_t> prompt;
  for (int32_t i = 0; i < 100; ++i) prompt.push_back((i * 37 + 11) % 397);
  const auto run = [&](const EngineConfig& config) {
    EngineCore engine(*m.model, nullptr, config);
    SamplingParams params;
    params.max_tokens = 8;
    params.ignore_eos = true;
    EXPECT_TRUE(engine.add_request(0, prompt, params).ok());
    OutputCollector collector;
    run_engine(engine, collector);
    return std::make_pair(collector.runs().at(0).samples.at(0).token_ids, engine.stats());
  };
  const auto want = run(small_engine_config(64, kBlockSize)).first;
  TempDir dir;
  EngineConfig config = small_engine_config(64, kBlockSize);
  config.kv_store.dir = dir.path();
  config.kv_store.cost_guard = false;
  const size_t image_bytes = page_image_bytes(kBlockSize, static_cast<size_t>(m.model->full_kv_bytes_per_block()));
  Pool pool(64, image_bytes);
  config.kv_store.host_pool = pool.pool;
  const auto [first, first_stats] = run(config);
  EXPECT_EQ(first, want);
  EXPECT_GT(first_stats.kv_store->host_pool_pages, 0);  // the persisted pages were staged in slabs
  const auto [second, second_stats] = run(config);      // a new engine: its pages come from disk
  EXPECT_EQ(second, want);
  EXPECT_EQ(second_stats.kv_store->pages_loaded, (100 - 1) / kBlockSize);
  EXPECT_EQ(second_stats.kv_store->host_pool_fallbacks, 0);
}

}  // namespace
}  // namespace deepinfer::testing
