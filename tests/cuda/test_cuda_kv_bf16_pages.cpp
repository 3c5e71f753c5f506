// KV store pages in a bf16 cache's own bytes on the GPU: blocks go to the host and back as they
// are (no conversion, half a float32 page), through a pinned slab's one-launch scatter and through
// the per-piece path alike; an engine stores bf16 pages and a second one hits them with the same
// tokens; a float32 cache (batch-invariant mode, same weights) never loads them; and a page whose
// last piece has a flipped bit goes up beside its failing body check and is never used. The host
// tier's cost probe times a page's scatter from a pinned slab.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <random>

#include "../engine/engine_test_util.h"
#include "../kvstore/kvstore_test_util.h"
#include "bf16_model.h"
#include "cuda_test_util.h"

namespace deepinfer::testing {
namespace {

constexpr int32_t kBlockSize = 16;
constexpr int32_t kPromptTokens = 100;
constexpr int32_t kStoredPages = (kPromptTokens - 1) / kBlockSize;

const std::string& bf16_qwen3() {
  static const std::string dir = write_bf16_copy(fixture_dir("qwen3"), "qwen3");
  return dir;
}

TEST(CudaBf16Pages, BlocksMoveAsTheirOwnBytesThroughSlabsAndOrdinaryMemory) {
  CudaModel bf16 = load_on_cuda(bf16_qwen3(), false);
  CudaModel f32 = load_on_cuda(fixture_dir("qwen3"), false);
  CausalLM& model = *bf16.model;
  ASSERT_EQ(model.kv_cache_dtype(), DType::kBF16);
  EXPECT_EQ(2 * model.full_kv_bytes_per_block(), f32.model->full_kv_bytes_per_block());
  expect_pages_move_as_their_bytes(model);
}

std::vector<int32_t> long_prompt() {
  std::vector<int32_t> prompt;
  for (int32_t i = 0; i < kPromptTokens; ++i) prompt.push_back((i * 37 + 11) % 397);
  return prompt;
}

struct Outcome {
  std::vector<int32_t> tokens;
  int32_t num_cached_tokens = 0;
  EngineStats stats;
};

// Runs the prompts one after another in one engine; the last one's outcome.
Outcome run_prompts(CausalLM& model, const std::string& store_dir, const std::vector<std::vector<int32_t>>& prompts) {
  EngineConfig config = small_engine_config(64, kBlockSize);
  if (!store_dir.empty()) {
    config.kv_store.dir = store_dir;
    config.kv_store.cost_guard = false;
    config.kv_store.model_identity = fingerprint_model_dir(bf16_qwen3()).value();
  }
  EngineCore engine(model, nullptr, config);
  Outcome outcome;
  for (size_t i = 0; i < prompts.size(); ++i) {
    SamplingParams params;
    params.temperature = 0.0;  // greedy: draws would depend on the request id, which differs between runs
    params.max_tokens = 12;
    params.ignore_eos = true;
    EXPECT_TRUE(engine.add_request(static_cast<int64_t>(i), prompts[i], params).ok());
    OutputCollector collector;
    run_engine(engine, collector);
    outcome.tokens = collector.runs().at(static_cast<int64_t>(i)).samples.at(0).token_ids;
    outcome.num_cached_tokens = collector.runs().at(static_cast<int64_t>(i)).num_cached_tokens;
  }
  outcome.stats = engine.stats();
  return outcome;
}

Outcome run_prompt(CausalLM& model, const std::string& store_dir) { return run_prompts(model, store_dir, {long_prompt()}); }

// The prompt's stored pages followed by the page of its last token: the prompt then finds all
// kStoredPages pages cached.
std::vector<int32_t> head_prompt() {
  const std::vector<int32_t> prompt = long_prompt();
  return {prompt.begin(), prompt.begin() + kStoredPages * kBlockSize + 1};
}

// Greedy tokens on the GPU depend on how the KV was computed (a K/V projection's bits depend on
// the product's row count), so each comparison below runs the same computation twice: the same
// prefill wrote the cached pages, and the same tokens are computed after them; only where the
// cached bytes come from differs.
TEST(CudaBf16Pages, AnEngineStoresBf16PagesAndASecondOneHitsThem) {
  CudaModel m = load_on_cuda(bf16_qwen3(), false);
  TempDir store;
  const std::string& dir = store.path();
  // The pages in the device prefix cache, from the head's prefill.
  const Outcome warm = run_prompts(*m.model, "", {head_prompt(), long_prompt()});
  ASSERT_EQ(warm.num_cached_tokens, kStoredPages * kBlockSize);
  // The same prefill stores them; a second engine loads them.
  run_prompts(*m.model, dir, {head_prompt()});
  const auto pages = stored_pages(dir);
  ASSERT_EQ(pages.size(), static_cast<size_t>(kStoredPages));
  for (const StoredPage& page : pages) {
    ASSERT_TRUE(page.header.has_value()) << page.path;
    EXPECT_EQ(page.header->kv_dtype, static_cast<uint8_t>(DType::kBF16)) << page.path;
    EXPECT_EQ(page.header->payload_bytes, static_cast<uint64_t>(m.model->full_kv_bytes_per_block())) << page.path;
  }
  const Outcome hit = run_prompt(*m.model, dir);
  EXPECT_EQ(hit.num_cached_tokens, kStoredPages * kBlockSize);
  EXPECT_EQ(hit.tokens, warm.tokens);

  // The same weights with a float32 cache: another fingerprint, so not one page loads.
  CudaModel invariant = load_on_cuda(bf16_qwen3(), true);
  ASSERT_EQ(invariant.model->kv_cache_dtype(), DType::kF32);
  const Outcome f32 = run_prompt(*invariant.model, dir);
  EXPECT_EQ(f32.num_cached_tokens, 0);
  EXPECT_EQ(f32.stats.kv_store->pages_loaded, 0);
}

// Two copies of one store: in one, page 3 has a flipped bit in the top byte of its last bf16 value
// (the last layer's V block); in the other, page 3 is gone. Both must hit pages 0-2 only and give
// the same tokens: the flipped page went up beside its failing check but was never used.
TEST(CudaBf16Pages, APageFailingItsBodyCheckBesideTheUploadIsNeverUsed) {
  CudaModel m = load_on_cuda(bf16_qwen3(), false);
  TempDir flipped, missing;
  run_prompt(*m.model, flipped.path());
  std::filesystem::copy(flipped.path(), missing.path(), std::filesystem::copy_options::recursive |
                                                             std::filesystem::copy_options::overwrite_existing);
  const auto page_3 = [](const std::string& dir) {
    for (const StoredPage& page : stored_pages(dir)) {
      if (page.header && page.header->page_index == 3) return page.path;
    }
    return std::string();
  };
  ASSERT_FALSE(page_3(flipped.path()).empty());
  flip_last_byte(page_3(flipped.path()));
  std::filesystem::remove(page_3(missing.path()));
  const Outcome reference = run_prompt(*m.model, missing.path());
  ASSERT_EQ(reference.num_cached_tokens, 3 * kBlockSize);
  const Outcome hit = run_prompt(*m.model, flipped.path());
  EXPECT_EQ(hit.num_cached_tokens, 3 * kBlockSize);
  EXPECT_EQ(hit.tokens, reference.tokens);
  int64_t failures = 0;
  for (const TierStats& t : hit.stats.kv_store->tiers) failures += t.checksum_failures;
  EXPECT_EQ(failures, 1);
}

TEST(CudaBf16Pages, TheHostTierCostIsAPageScatterFromAPinnedSlab) {
  CudaModel m = load_on_cuda(bf16_qwen3(), false);
  KvStoreConfig config;  // no directory: the host tier alone
  config.host_bytes = 1 << 20;
  const StandaloneOffload s = open_offload(*m.model, config, kBlockSize);
  ASSERT_NE(s.offload, nullptr);
  const TierCost& host = s.offload->store().tier_costs().at(0);
  EXPECT_EQ(host.probe, "page upload on cuda from a pinned slab");
  EXPECT_GT(host.bytes_per_s, 0.0);
  std::printf("host tier load probe: %.2f GB/s, %lld-byte bf16 pages (%s)\n", host.bytes_per_s / 1e9,
              static_cast<long long>(m.model->full_kv_bytes_per_block()), host.probe.c_str());
}

}  // namespace
}  // namespace deepinfer::testing
