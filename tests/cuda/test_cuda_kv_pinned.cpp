// The KV store's pinned host tier on CUDA: the backend's slab pool is page-locked memory, copies
// from and to it are direct DMAs, a slab freed while its upload is still running is not handed
// out (and overwritten) before the upload ended, and KV pages that went device -> pinned slab ->
// store -> pinned slab -> device give the same bytes and the same logits as recomputing them.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>

#include "cuda_test_util.h"
#include "fixtures.h"
#include "kvstore/kv_store.h"
#include "model/model.h"

namespace deepinfer::testing {
namespace {

TEST(CudaPinnedPool, SlabsArePageLockedHostMemory) {
  auto backend = cuda_backend();
  std::shared_ptr<HostSlabPool> pool = backend->make_pinned_pool(size_t{4} << 20, size_t{1} << 20);
  ASSERT_NE(pool, nullptr);
  EXPECT_EQ(pool->num_slabs(), 4u);
  void* slab = pool->take(1000);
  ASSERT_NE(slab, nullptr);
  cudaPointerAttributes attributes{};
  ASSERT_EQ(cudaPointerGetAttributes(&attributes, static_cast<uint8_t*>(slab) + 100), cudaSuccess);
  EXPECT_EQ(attributes.type, cudaMemoryTypeHost);
  // Ordinary memory is not pinned: the staging path stays for it.
  std::vector<uint8_t> pageable(1000);
  ASSERT_EQ(cudaPointerGetAttributes(&attributes, pageable.data()), cudaSuccess);
  EXPECT_EQ(attributes.type, cudaMemoryTypeUnregistered);
  pool->give_back(slab);
}

// A big upload queued behind device work, its slab given back and taken again at once and
// overwritten: the device must still receive the first contents.
TEST(CudaPinnedPool, ASlabFreedDuringItsUploadIsNotReusedUntilTheUploadEnded) {
  auto backend = cuda_backend();
  constexpr size_t kBytes = size_t{64} << 20;
  std::shared_ptr<HostSlabPool> pool = backend->make_pinned_pool(kBytes, kBytes);
  ASSERT_EQ(pool->num_slabs(), 1u);
  DeviceBuffer busy = backend->allocate(size_t{1} << 30);
  DeviceBuffer busy_copy = backend->allocate(size_t{1} << 30);
  DeviceBuffer dst = backend->allocate(kBytes);
  for (int round = 0; round < 3; ++round) {
    auto* slab = static_cast<uint8_t*>(pool->take(kBytes));
    ASSERT_NE(slab, nullptr);
    for (size_t i = 0; i < kBytes; i += 4096) slab[i] = static_cast<uint8_t>(round * 7 + i / 4096);
    // Several ms of device work ahead of the upload, so it is still queued when the slab returns.
    for (int k = 0; k < 4; ++k) backend->copy_on_device(busy_copy.data(), busy.data(), busy.size_bytes());
    backend->copy_to_device(dst.data(), slab, kBytes);
    pool->give_back(slab);
    auto* again = static_cast<uint8_t*>(pool->take(kBytes));
    ASSERT_EQ(again, slab);  // the one slab: take waited for the upload before handing it out
    std::memset(again, 0xEE, kBytes);
    const std::vector<uint8_t> got = download<uint8_t>(*backend, dst, kBytes);
    for (size_t i = 0; i < kBytes; i += 4096) {
      ASSERT_EQ(got[i], static_cast<uint8_t>(round * 7 + i / 4096)) << "round " << round << " offset " << i;
    }
    pool->give_back(again);
  }
}

struct PinnedModel {
  std::unique_ptr<Backend> backend;
  std::unique_ptr<CausalLM> model;
};

PinnedModel load_fixture(const std::string& name) {
  PinnedModel m;
  m.backend = cuda_backend();
  auto model = load_model(fixture_dir(name), *m.backend, false);
  if (!model.ok()) throw std::runtime_error(model.error().message);
  m.model = std::move(*model);
  return m;
}

// Runs tokens [from, to) of one sequence whose pages are blocks; logits of every new token.
std::vector<float> run(CausalLM& model, const std::vector<int32_t>& tokens, int32_t from, int32_t to,
                       const std::vector<int32_t>& blocks, int32_t block_size) {
  ForwardBatch batch;
  for (int32_t i = from; i < to; ++i) {
    batch.token_ids.push_back(tokens[static_cast<size_t>(i)]);
    batch.positions.push_back(i);
    batch.slot_mapping.push_back(blocks[static_cast<size_t>(i / block_size)] * block_size + i % block_size);
    batch.logit_rows.push_back(i - from);
  }
  batch.query_start = {0, to - from};
  batch.seq_len = {to};
  batch.block_table = blocks;
  batch.max_blocks_per_seq = static_cast<int32_t>(blocks.size());
  std::vector<float> logits(static_cast<size_t>(to - from) * static_cast<size_t>(model.config().vocab_size));
  model.forward(batch, logits.data());
  return logits;
}

// Device KV -> pinned staged images -> store (host tier and disk) -> a fresh store loading them
// from disk into pinned slabs -> other device blocks by direct DMA, pages freed right after.
TEST(CudaPinnedStore, AStoreHitGivesTheSameKvBytesAndLogitsAsRecompute) {
  constexpr int32_t kBlockSize = 16;
  constexpr int32_t kPages = 4;
  constexpr int32_t kPrefix = kPages * kBlockSize;
  constexpr int32_t kTotal = kPrefix + kBlockSize;
  PinnedModel m = load_fixture("llama");
  CausalLM& model = *m.model;
  model.allocate_kv_cache(KvCacheShape{16, kBlockSize, 0});
  std::vector<int32_t> tokens;
  for (int32_t i = 0; i < kTotal; ++i) tokens.push_back((i * 37 + 11) % 397);
  const std::vector<int32_t> computed_blocks = {0, 1, 2, 3, 4};
  run(model, tokens, 0, kPrefix, computed_blocks, kBlockSize);
  const std::vector<float> recomputed = run(model, tokens, kPrefix, kTotal, computed_blocks, kBlockSize);

  const int64_t payload_bytes = model.full_kv_bytes_per_block();
  const size_t slab_bytes = page_image_bytes(kBlockSize, static_cast<size_t>(payload_bytes));
  std::shared_ptr<HostSlabPool> pool = m.backend->make_pinned_pool(slab_bytes * 16, slab_bytes);
  ASSERT_NE(pool, nullptr);
  std::vector<PageRequest> requests;
  BlockHash hash = prefix_root_hash("cuda-pinned", "");
  for (int32_t p = 0; p < kPages; ++p) {
    const std::vector<int32_t> page_tokens(tokens.begin() + p * kBlockSize, tokens.begin() + (p + 1) * kBlockSize);
    hash = chain_block_hash(hash, page_tokens.data(), kBlockSize, {});
    requests.push_back(PageRequest{hash, p, page_tokens});
  }
  const std::string dir = ::testing::TempDir() + "/cuda-pinned-store";
  std::filesystem::remove_all(dir);
  KvStoreConfig config;
  config.dir = dir;
  config.cost_guard = false;
  config.host_pool = pool;
  {
    auto store = KvStore::open(config, "cuda-pinned");
    ASSERT_TRUE(store.ok());
    for (int32_t p = 0; p < kPages; ++p) {
      const PageRequest& r = requests[static_cast<size_t>(p)];
      PageWrite write{r.hash, r.page_index, r.token_ids, {}, TrafficClass::kDefault, nullptr};
      write.staged = (*store)->stage_page(kBlockSize, payload_bytes);
      ASSERT_TRUE(pool->owns(write.staged->data(), write.staged->size()));
      model.read_full_kv_blocks({p}, page_payload_region(*write.staged, kBlockSize).data());
      ASSERT_TRUE((*store)->enqueue_write(std::move(write)));
    }
    (*store)->flush();
  }
  EXPECT_EQ(pool->num_free(), pool->num_slabs());

  // A fresh store (as after a restart): pages come from disk into pinned slabs.
  config.host_bytes = 0;
  auto store = KvStore::open(config, "cuda-pinned");
  ASSERT_TRUE(store.ok());
  const std::vector<int32_t> loaded_blocks = {8, 9, 10, 11, 12};
  {
    std::vector<LoadedPage> pages = (*store)->load_chain(requests, payload_bytes, 1e9);
    ASSERT_EQ(pages.size(), static_cast<size_t>(kPages));
    for (int32_t p = 0; p < kPages; ++p) {
      const LoadedPage& page = pages[static_cast<size_t>(p)];
      ASSERT_TRUE(pool->owns(page.payload.data(), page.payload.size()));
      model.write_full_kv_blocks({loaded_blocks[static_cast<size_t>(p)]}, page.payload.data());
    }
  }  // the images are freed with the uploads possibly in flight
  // Scribble over every slab the pool hands out now (each waits for the upload that read it).
  std::vector<void*> taken;
  while (void* slab = pool->take(slab_bytes)) {
    std::memset(slab, 0x7F, slab_bytes);
    taken.push_back(slab);
  }
  for (void* slab : taken) pool->give_back(slab);

  const auto block_bytes = static_cast<size_t>(payload_bytes);
  std::vector<uint8_t> want(block_bytes * kPages), got(block_bytes * kPages);
  model.read_full_kv_blocks({0, 1, 2, 3}, want.data());
  model.read_full_kv_blocks({8, 9, 10, 11}, got.data());
  EXPECT_TRUE(want == got) << "KV bytes differ after the store round trip";
  const std::vector<float> hit = run(model, tokens, kPrefix, kTotal, loaded_blocks, kBlockSize);
  expect_close(hit, recomputed, 1e-5, 1e-5, "logits after a store hit vs recompute");
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace deepinfer::testing
