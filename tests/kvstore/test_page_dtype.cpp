// Pages in the cache's own element type and body checks beside the upload: the header records the
// element type and a page of another type is never loaded; version-1 pages (float32 whatever the
// cache) are rejected as misses, on disk before and after start-up; a kBeside load hands pages out
// with their body check pending, and a bit flip in the last piece fails that check, drops the page
// and keeps it out of host memory; the engine times the host tier's cost on its own upload path.
#include <gtest/gtest.h>
#include <xxhash.h>

#include <cstddef>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "../engine/engine_test_util.h"
#include "kvstore/disk_tier.h"
#include "kvstore_test_util.h"

namespace deepinfer::testing {
namespace {

constexpr int32_t kTokens = 16;
constexpr size_t kPayload = 2048;

KvStoreConfig typed_config(const std::string& dir, DType kv_dtype, int64_t host_bytes = 0) {
  KvStoreConfig config = tier_only_config(dir);
  config.kv_dtype = kv_dtype;
  config.host_bytes = host_bytes;
  return config;
}

std::unique_ptr<KvStore> open_typed(const KvStoreConfig& config, const std::string& fingerprint) {
  auto store = KvStore::open(config, fingerprint);
  EXPECT_TRUE(store.ok()) << store.error().message;
  return std::move(*store);
}

void write_all(KvStore& store, const std::vector<TestPage>& pages) {
  for (const TestPage& page : pages) ASSERT_TRUE(store.enqueue_write(to_write(page)));
  store.flush();
}

// The image a version-1 build wrote for a page: the same fields, version 1, its header checksum
// recomputed, so only the version check can reject it.
std::vector<uint8_t> version_one_image(const TestPage& page, const std::string& fingerprint, size_t payload_bytes) {
  std::vector<uint8_t> payload(payload_bytes, 0x3c);
  PageContent content{PageIdentity{page.request.hash, layout_id_of(fingerprint), page.request.page_index,
                                   page.request.token_ids, DType::kF32},
                      TrafficClass::kDefault, 0, payload};
  const SharedPage image = encode_page(content, default_host_allocator());
  std::vector<uint8_t> bytes(image->data(), image->data() + image->size());
  PageHeader header;
  std::memcpy(&header, bytes.data(), sizeof(header));
  header.version = 1;
  header.kv_dtype = 0;  // version 1's reserved byte
  header.header_xxh3 = XXH3_64bits(&header, offsetof(PageHeader, header_xxh3));
  std::memcpy(bytes.data(), &header, sizeof(header));
  return bytes;
}

void write_file(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

TEST(PageDtype, TheHeaderRecordsTheElementTypeAndAnotherTypeIsRejected) {
  const TestPage page = make_chain(1, kTokens, kPayload).front();
  const PageIdentity bf16{page.request.hash, layout_id_of("layout"), 0, page.request.token_ids, DType::kBF16};
  const SharedPage image =
      encode_page(PageContent{bf16, TrafficClass::kDefault, 0, page.payload}, default_host_allocator());
  auto header = parse_page_header(image->bytes(), image->size());
  ASSERT_TRUE(header.ok());
  EXPECT_EQ(header->version, kPageFormatVersion);
  EXPECT_EQ(header->kv_dtype, static_cast<uint8_t>(DType::kBF16));
  EXPECT_TRUE(verify_page(image->bytes(), bf16).ok());
  PageIdentity f32 = bf16;
  f32.kv_dtype = DType::kF32;
  auto verdict = verify_page(image->bytes(), f32);
  ASSERT_FALSE(verdict.ok());
  EXPECT_NE(verdict.error().message.find("element type"), std::string::npos) << verdict.error().message;
}

TEST(PageDtype, VersionOnePagesAreRejected) {
  const TestPage page = make_chain(1, kTokens, kPayload).front();
  const std::vector<uint8_t> old = version_one_image(page, "layout", kPayload);
  const PageIdentity expected{page.request.hash, layout_id_of("layout"), 0, page.request.token_ids, DType::kF32};
  auto verdict = verify_page(old, expected);
  ASSERT_FALSE(verdict.ok());
  EXPECT_NE(verdict.error().message.find("version 1"), std::string::npos) << verdict.error().message;
}

// The pages a version-1 build left on disk for a bf16 cache (float32 payloads, twice the bytes):
// files there at start-up are dropped by the index rebuild, a file appearing later (another
// process) fails the header check of the file-system fallback; both are misses, never a crash.
TEST(PageDtype, OldFormatPagesOnDiskAreMissesNotCrashes) {
  TempDir dir;
  const auto pages = make_chain(4, kTokens, kPayload);
  const std::string fingerprint = "model|kv=BF16";
  for (size_t i = 0; i < 2; ++i) {
    write_file(disk_page_path(dir.path(), pages[i].request.hash),
               version_one_image(pages[i], fingerprint, 2 * kPayload));
  }
  auto store = open_typed(typed_config(dir.path(), DType::kBF16), fingerprint);
  EXPECT_FALSE(std::filesystem::exists(disk_page_path(dir.path(), pages[0].request.hash)));
  EXPECT_EQ(store->load_chain(requests_of(pages), kPayload, 1.0).size(), 0u);
  // Written after start-up (another process): the file-system fallback's header check rejects it.
  write_file(disk_page_path(dir.path(), pages[0].request.hash), version_one_image(pages[0], fingerprint, 2 * kPayload));
  EXPECT_EQ(store->load_chain(requests_of(pages), kPayload, 1.0, BodyCheck::kBeside).size(), 0u);
  EXPECT_EQ(store->stats().tiers.at(0).misses, 2);
  // The directory still works: current pages written over the same keys load.
  write_all(*store, pages);
  EXPECT_EQ(store->load_chain(requests_of(pages), kPayload, 1.0).size(), 4u);
}

// Two guards keep a bf16 cache's pages out of a float32 cache: the engine's fingerprint (and so
// the layout id every page carries) names the cache dtype, and the header records the element type.
// (A rejected page is deleted, so each reader gets a freshly written directory.)
TEST(PageDtype, Bf16PagesNeverLoadIntoAFloat32Cache) {
  const auto pages = make_chain(3, kTokens, kPayload);
  const auto load_written_by_bf16 = [&](DType reader_dtype, const std::string& reader_fingerprint) {
    TempDir dir;
    {
      auto bf16 = open_typed(typed_config(dir.path(), DType::kBF16), "model|kv=BF16");
      write_all(*bf16, pages);
    }
    auto reader = open_typed(typed_config(dir.path(), reader_dtype), reader_fingerprint);
    const size_t loaded = reader->load_chain(requests_of(pages), kPayload, 1.0).size();
    EXPECT_EQ(reader->stats().tiers.at(0).checksum_failures, loaded == 0 ? 1 : 0);
    return loaded;
  };
  EXPECT_EQ(load_written_by_bf16(DType::kF32, "model|kv=F32"), 0u);
  EXPECT_EQ(load_written_by_bf16(DType::kF32, "model|kv=BF16"), 0u);  // the header's own check
  EXPECT_EQ(load_written_by_bf16(DType::kBF16, "model|kv=BF16"), 3u);
}

TEST(VerifyBeside, PagesComeWithTheirBodyChecks) {
  TempDir dir;
  const auto pages = make_chain(4, kTokens, kPayload);
  auto store = open_typed(typed_config(dir.path(), DType::kBF16, 1 << 20), "layout");
  write_all(*store, pages);
  const auto loaded = store->load_chain(requests_of(pages), kPayload, 1.0, BodyCheck::kBeside);
  ASSERT_EQ(loaded.size(), 4u);
  for (size_t i = 0; i < loaded.size(); ++i) {
    ASSERT_TRUE(loaded[i].body_ok.valid());
    EXPECT_TRUE(loaded[i].verified());
    EXPECT_EQ(std::vector<uint8_t>(loaded[i].payload.begin(), loaded[i].payload.end()), pages[i].payload);
  }
  EXPECT_EQ(store->stats().pages_loaded, 4);
  // kBefore pages carry no pending check.
  const auto before = store->load_chain(requests_of(pages), kPayload, 1.0);
  ASSERT_EQ(before.size(), 4u);
  EXPECT_FALSE(before[0].body_ok.valid());
  EXPECT_TRUE(before[0].verified());
}

// A flipped bit in the page's last piece (the last layer's V block) passes the identity checks,
// so the page is handed out; its body check then fails: the page is dropped from the disk, counted,
// and never promoted into host memory, while the pages around it pass and are promoted.
TEST(VerifyBeside, ABitFlipInTheLastPieceFailsItsCheckAndDropsThePage) {
  TempDir dir;
  const auto pages = make_chain(4, kTokens, kPayload);
  {
    auto writer = open_typed(typed_config(dir.path(), DType::kBF16), "layout");
    write_all(*writer, pages);
  }
  const std::string path = disk_page_path(dir.path(), pages[2].request.hash);
  flip_last_byte(path);
  auto store = open_typed(typed_config(dir.path(), DType::kBF16, 1 << 20), "layout");
  const auto loaded = store->load_chain(requests_of(pages), kPayload, 1.0, BodyCheck::kBeside);
  ASSERT_EQ(loaded.size(), 4u);
  EXPECT_TRUE(loaded[0].verified());
  EXPECT_TRUE(loaded[1].verified());
  EXPECT_FALSE(loaded[2].verified());
  EXPECT_TRUE(loaded[3].verified());
  const KvStoreStats stats = store->stats();
  EXPECT_EQ(stats.tiers.at(1).checksum_failures, 1);
  EXPECT_FALSE(std::filesystem::exists(path));
  EXPECT_EQ(stats.tiers.at(0).num_pages, 3) << "only pages that passed were promoted";
  EXPECT_EQ(store->load_chain(requests_of(pages), kPayload, 1.0).size(), 2u);
}

// The cost guard's host-tier input is the backend's page upload (here the CPU's copy into the
// cache), not the tier's memcpy probe; the other tiers keep their own probes.
TEST(HostLoadProbe, TheEngineTimesItsOwnPageUpload) {
  TestModel m = load_test_model("llama", true);
  TempDir dir;
  KvStoreConfig config;
  config.dir = dir.path();
  const StandaloneOffload s = open_offload(*m.model, config, 16);
  ASSERT_NE(s.offload, nullptr);
  const std::vector<TierCost>& costs = s.offload->store().tier_costs();
  ASSERT_EQ(costs.size(), 2u);
  EXPECT_EQ(costs[0].probe, "page upload on cpu");
  EXPECT_GT(costs[0].bytes_per_s, 0.0);
  EXPECT_EQ(costs[1].probe, "cold open + read()");
}

}  // namespace
}  // namespace deepinfer::testing
