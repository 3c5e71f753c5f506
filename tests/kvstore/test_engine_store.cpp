// The engine over the persistent store: a second engine (or process, or one started after the
// first was killed with SIGKILL) hits the pages the first wrote and produces the same tokens;
// corrupted pages are recomputed; an unavailable Redis never fails a request.
#include <gtest/gtest.h>

#include <cstddef>
#include <fstream>
#include <sstream>

#include "../engine/engine_test_util.h"
#include "kvstore/disk_tier.h"
#include "kvstore_test_util.h"

namespace deepinfer::testing {
namespace {

constexpr int32_t kBlockSize = 16;
constexpr int32_t kPromptTokens = 100;  // 6 full pages before the page of the last token
constexpr int32_t kStoredPages = (kPromptTokens - 1) / kBlockSize;

std::vector<int32_t> long_prompt() {
  std::vector<int32_t> prompt;
  for (int32_t i = 0; i < kPromptTokens; ++i) prompt.push_back((i * 37 + 11) % 397);
  return prompt;
}

EngineConfig store_engine_config(const std::string& dir, const std::string& backend = "disk",
                                 const std::string& fixture = "llama") {
  EngineConfig config = small_engine_config(64, kBlockSize);
  config.kv_store.dir = dir;
  config.kv_store.backend = backend;
  config.kv_store.cost_guard = false;  // the tiny fixture recomputes a page in microseconds
  config.kv_store.batch_invariant = true;  // as load_test_model(..., true) loads the models
  config.kv_store.model_identity = fingerprint_model_dir(fixture_dir(fixture)).value();
  return config;
}

struct Outcome {
  std::vector<int32_t> tokens;
  int32_t num_cached_tokens = 0;
  EngineStats stats;
};

Outcome run_prompt(EngineCore& engine, const std::string& cache_salt = "") {
  SamplingParams params;
  params.max_tokens = 12;
  params.ignore_eos = true;
  EXPECT_TRUE(engine.add_request(0, long_prompt(), params, 0, cache_salt).ok());
  OutputCollector collector;
  run_engine(engine, collector);
  Outcome outcome;
  const RequestRun& run = collector.runs().at(0);
  outcome.tokens = run.samples.at(0).token_ids;
  outcome.num_cached_tokens = run.num_cached_tokens;
  outcome.stats = engine.stats();
  return outcome;
}

Outcome run_prompt(CausalLM& model, const EngineConfig& config, const std::string& cache_salt = "") {
  EngineCore engine(model, nullptr, config);
  return run_prompt(engine, cache_salt);
}

std::vector<int32_t> reference_tokens(CausalLM& model) {
  return run_prompt(model, small_engine_config(64, kBlockSize)).tokens;
}

int64_t tier_stat(const EngineStats& stats, const std::string& tier, int64_t TierStats::*field) {
  for (const TierStats& t : stats.kv_store.value().tiers) {
    if (t.name == tier) return t.*field;
  }
  ADD_FAILURE() << "no tier " << tier;
  return -1;
}

TEST(EngineStore, ASecondEngineHitsTheStoreAndGivesTheSameTokens) {
  TestModel m = load_test_model("llama", /*batch_invariant=*/true);
  const std::vector<int32_t> want = reference_tokens(*m.model);
  TempDir dir;
  const Outcome first = run_prompt(*m.model, store_engine_config(dir.path()));
  EXPECT_EQ(first.tokens, want);
  EXPECT_EQ(first.num_cached_tokens, 0);
  const Outcome second = run_prompt(*m.model, store_engine_config(dir.path()));
  EXPECT_EQ(second.tokens, want);
  EXPECT_EQ(second.num_cached_tokens, kStoredPages * kBlockSize);
  // Served from host memory? No: a new engine has a new, empty host tier; these came from disk.
  EXPECT_EQ(tier_stat(second.stats, "disk", &TierStats::hits), kStoredPages);
  // The prefix cache's own counters see the request once, with the imported pages as hits.
  EXPECT_EQ(second.stats.prefix_cache.queried_tokens, kPromptTokens);
  EXPECT_EQ(second.stats.prefix_cache.hit_tokens, kStoredPages * kBlockSize);
}

TEST(EngineStore, TenantsDoNotShareStoredPages) {
  TestModel m = load_test_model("llama", true);
  TempDir dir;
  EXPECT_EQ(run_prompt(*m.model, store_engine_config(dir.path()), "tenant-a").num_cached_tokens, 0);
  EXPECT_EQ(run_prompt(*m.model, store_engine_config(dir.path()), "tenant-b").num_cached_tokens, 0);
  EXPECT_EQ(run_prompt(*m.model, store_engine_config(dir.path()), "tenant-a").num_cached_tokens,
            kStoredPages * kBlockSize);
  // Another model identity (other weights, same config) never hits either.
  EngineConfig other = store_engine_config(dir.path());
  other.kv_store.model_identity += "other-weights";
  EXPECT_EQ(run_prompt(*m.model, other, "tenant-a").num_cached_tokens, 0);
}

// KV computed by other kernels differs in its last bits: pages of the default mode never load
// into a batch-invariant engine, nor the cpu backend's into the reference backend's.
TEST(EngineStore, OtherKernelsDoNotShareStoredPages) {
  TestModel m = load_test_model("llama", true);
  TempDir dir;
  EXPECT_EQ(run_prompt(*m.model, store_engine_config(dir.path())).num_cached_tokens, 0);
  EngineConfig default_mode = store_engine_config(dir.path());
  default_mode.kv_store.batch_invariant = false;
  TestModel fast = load_test_model("llama", false);
  EXPECT_EQ(run_prompt(*fast.model, default_mode).num_cached_tokens, 0);
  BackendOptions options;
  options.batch_invariant = true;
  const std::unique_ptr<Backend> ref = make_backend("ref", options).value();
  const std::unique_ptr<CausalLM> ref_model = load_model(fixture_dir("llama"), *ref, false).value();
  const Outcome on_ref = run_prompt(*ref_model, store_engine_config(dir.path()));
  EXPECT_EQ(on_ref.num_cached_tokens, 0);
  EXPECT_EQ(run_prompt(*m.model, store_engine_config(dir.path())).num_cached_tokens, kStoredPages * kBlockSize);
}

// An fp8 cache's pages are its e4m3 bytes: a second fp8 engine hits them and gives the tokens of
// an fp8 run without the store; a float32 cache never loads them, nor an fp8 one a float32 page.
TEST(EngineStore, Fp8CachePagesComeBackAsTheyWereAndNeverMixWithFloat32) {
  TestModel fp8 = load_test_model("llama", true, nullptr, DType::kF8E4M3);
  CausalLM* model = fp8.model.get();
  ASSERT_EQ(model->kv_cache_dtype(), DType::kF8E4M3);
  const std::vector<int32_t> want = reference_tokens(*model);
  TempDir dir;
  EXPECT_EQ(run_prompt(*model, store_engine_config(dir.path())).num_cached_tokens, 0);
  const Outcome second = run_prompt(*model, store_engine_config(dir.path()));
  EXPECT_EQ(second.tokens, want);
  EXPECT_EQ(second.num_cached_tokens, kStoredPages * kBlockSize);
  TestModel f32 = load_test_model("llama", true);
  EXPECT_EQ(run_prompt(*f32.model, store_engine_config(dir.path())).num_cached_tokens, 0);
  TempDir f32_dir;
  EXPECT_EQ(run_prompt(*f32.model, store_engine_config(f32_dir.path())).num_cached_tokens, 0);
  EXPECT_EQ(run_prompt(*model, store_engine_config(f32_dir.path())).num_cached_tokens, 0);
}

TEST(EngineStore, AHeldRequestJoinsWhileOthersRun) {
  TestModel m = load_test_model("llama", true);
  TempDir dir;
  run_prompt(*m.model, store_engine_config(dir.path()));
  std::vector<RequestSpec> requests(3);
  for (int32_t i = 0; i < 3; ++i) {
    requests[static_cast<size_t>(i)].params.max_tokens = 12;
    requests[static_cast<size_t>(i)].params.ignore_eos = true;
    requests[static_cast<size_t>(i)].params.seed = 7;  // the draws must not depend on the request id
  }
  requests[0].prompt = long_prompt();  // stored
  for (int32_t i = 0; i < 150; ++i) requests[1].prompt.push_back((i * 53 + 5) % 397);  // not stored
  requests[2].prompt = long_prompt();
  requests[2].prompt.resize(70);  // a stored prefix of 4 pages, then its own last token
  requests[2].prompt.push_back(396);
  const auto want = run_each_alone(*m.model, small_engine_config(64, kBlockSize), requests);
  // Request 1 (nothing stored) starts alone; the two with stored prefixes arrive while it runs.
  EngineCore engine(*m.model, nullptr, store_engine_config(dir.path()));
  OutputCollector collector;
  run_engine(engine, collector, [&](int64_t step) {
    for (int64_t id : step == 0 ? std::vector<int64_t>{1} : step == 2 ? std::vector<int64_t>{0, 2} : std::vector<int64_t>{}) {
      ASSERT_TRUE(engine.add_request(id, requests[static_cast<size_t>(id)].prompt, requests[static_cast<size_t>(id)].params).ok());
    }
  });
  const auto& got = collector.runs();
  for (int64_t id = 0; id < 3; ++id) EXPECT_EQ(got.at(id).samples.at(0).token_ids, want.at(id).samples.at(0).token_ids) << id;
  EXPECT_EQ(got.at(0).num_cached_tokens, kStoredPages * kBlockSize);
  EXPECT_EQ(got.at(1).num_cached_tokens, 0);
  EXPECT_EQ(got.at(2).num_cached_tokens, 4 * kBlockSize);
}

// Sliding-window models store their full-attention pages (none for Mistral, whose every layer
// slides) and rebuild the window layers by a replay (test_engine_swa.cpp): with the default
// replay (128 tokens, more than this prompt) the hit is exact.
TEST(EngineStore, SlidingWindowModelsGiveTheSameTokens) {
  for (const auto& [fixture, want_cached] : {std::pair<std::string, int32_t>{"gemma3", kStoredPages * kBlockSize},
                                             std::pair<std::string, int32_t>{"mistral_swa", kStoredPages * kBlockSize}}) {
    SCOPED_TRACE(fixture);
    TestModel m = load_test_model(fixture, true);
    const std::vector<int32_t> want = run_prompt(*m.model, small_engine_config(64, kBlockSize)).tokens;
    TempDir dir;
    EXPECT_EQ(run_prompt(*m.model, store_engine_config(dir.path(), "disk", fixture)).tokens, want);
    const Outcome second = run_prompt(*m.model, store_engine_config(dir.path(), "disk", fixture));
    EXPECT_EQ(second.tokens, want);
    EXPECT_EQ(second.num_cached_tokens, want_cached);
  }
}

TEST(EngineStore, ARestartAfterKillNineHitsAndGivesTheSameTokens) {
  TestModel m = load_test_model("llama", true);
  TempDir dir;
  const std::string out = dir.path() + "/child.out";
  const int status = run_child({{"DIKV_CHILD", "engine_run"}, {"DIKV_DIR", dir.path() + "/store"},
                                {"DIKV_OUT", out}, {"DIKV_KILL", "1"}});
  ASSERT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << "status " << status;
  std::ifstream in(out);
  int32_t child_cached = -1;
  in >> child_cached;
  std::vector<int32_t> child_tokens;
  for (int32_t token = 0; in >> token;) child_tokens.push_back(token);
  EXPECT_EQ(child_cached, 0);
  ASSERT_FALSE(child_tokens.empty());
  const Outcome restarted = run_prompt(*m.model, store_engine_config(dir.path() + "/store"));
  EXPECT_EQ(restarted.num_cached_tokens, kStoredPages * kBlockSize);
  EXPECT_EQ(restarted.tokens, child_tokens);
  EXPECT_EQ(restarted.tokens, reference_tokens(*m.model));
}

TEST(EngineStore, TwoProcessesShareOneStoreDirectory) {
  TestModel m = load_test_model("llama", true);
  TempDir dir;
  // This process's engine opens the (empty) store before the other process writes to it.
  EngineCore engine(*m.model, nullptr, store_engine_config(dir.path()));
  const int status = run_child({{"DIKV_CHILD", "engine_run"}, {"DIKV_DIR", dir.path()},
                                {"DIKV_OUT", dir.path() + "/child.out"}});
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "status " << status;
  const Outcome outcome = run_prompt(engine);
  EXPECT_EQ(outcome.num_cached_tokens, kStoredPages * kBlockSize);
  EXPECT_EQ(outcome.tokens, reference_tokens(*m.model));
}

// The stored file of page page_index (read from the headers).
std::string page_file_with_index(const std::string& dir, uint32_t page_index) {
  for (const StoredPage& page : stored_pages(dir)) {
    if (page.header && page.header->page_index == page_index) return page.path;
  }
  ADD_FAILURE() << "no stored page " << page_index;
  return {};
}

TEST(EngineStore, StoredPagesCarryTheRequestsTrafficClass) {
  TestModel m = load_test_model("llama", true);
  TempDir dir;
  {
    EngineCore engine(*m.model, nullptr, store_engine_config(dir.path()));
    SamplingParams params;
    params.max_tokens = 2;
    ASSERT_TRUE(engine.add_request(0, long_prompt(), params, 0, "", TrafficClass::kAgent).ok());
    OutputCollector collector;
    run_engine(engine, collector);
  }  // closing the store drains its write queue
  for (int32_t i = 0; i < kStoredPages; ++i) {
    std::ifstream in(page_file_with_index(dir.path(), static_cast<uint32_t>(i)), std::ios::binary);
    PageHeader header{};
    in.read(reinterpret_cast<char*>(&header), sizeof(header));
    EXPECT_EQ(header.traffic_class, static_cast<uint8_t>(TrafficClass::kAgent)) << "page " << i;
  }
}

TEST(EngineStore, CorruptedPagesAreRecomputed) {
  TestModel m = load_test_model("llama", true);
  const std::vector<int32_t> want = reference_tokens(*m.model);
  const std::vector<std::pair<std::string, std::function<void(const std::string&)>>> corruptions = {
      {"flip a KV byte",
       [](const std::string& path) {
         std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
         f.seekp(-1, std::ios::end);
         f.put('\x5a');
       }},
      {"truncate", [](const std::string& path) { std::filesystem::resize_file(path, 300); }},
      {"zero the header",
       [](const std::string& path) {
         std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
         const std::vector<char> zeros(sizeof(PageHeader), 0);
         f.write(zeros.data(), static_cast<std::streamsize>(zeros.size()));
       }},
      {"flip a header bit",
       [](const std::string& path) {
         std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
         f.seekg(offsetof(PageHeader, payload_bytes));
         const char c = static_cast<char>(f.get() ^ 0x01);
         f.seekp(offsetof(PageHeader, payload_bytes));
         f.put(c);
       }},
      {"zero-filled tail",
       [](const std::string& path) {
         const auto size = static_cast<std::streamoff>(std::filesystem::file_size(path));
         std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
         const std::vector<char> zeros(static_cast<size_t>(size / 2), 0);
         f.seekp(size - static_cast<std::streamoff>(zeros.size()));
         f.write(zeros.data(), static_cast<std::streamsize>(zeros.size()));
       }},
      // Written and fsynced, never renamed into place (by a writer that died before it).
      {"never renamed",
       [](const std::string& path) {
         const auto store = std::filesystem::path(path).parent_path().parent_path().parent_path();
         std::filesystem::rename(path, store / "tmp" / "0123456789abcdef.1.0.tmp");
       }},
  };
  for (const auto& [name, corrupt] : corruptions) {
    SCOPED_TRACE(name);
    TempDir dir;
    run_prompt(*m.model, store_engine_config(dir.path()));
    corrupt(page_file_with_index(dir.path(), 3));
    const Outcome outcome = run_prompt(*m.model, store_engine_config(dir.path()));
    EXPECT_EQ(outcome.tokens, want);
    EXPECT_EQ(outcome.num_cached_tokens, 3 * kBlockSize);
  }
}

// Loads upload each page beside its body check. A bit flip in the exponent of page 3's last value
// (its last piece: the last layer's V block) passes every identity check, so the page goes up,
// but fails its body check: the engine commits pages 0-2 only, so page 3's blocks never reach the
// prefix index or attention, and the request recomputes it and everything after.
TEST(EngineStore, APageFailingItsBodyCheckBesideTheUploadIsNeverUsed) {
  TestModel m = load_test_model("llama", true);
  const std::vector<int32_t> want = reference_tokens(*m.model);
  TempDir dir;
  run_prompt(*m.model, store_engine_config(dir.path()));
  const std::string path = page_file_with_index(dir.path(), 3);
  flip_last_byte(path);
  const Outcome outcome = run_prompt(*m.model, store_engine_config(dir.path()));
  EXPECT_EQ(outcome.tokens, want);
  EXPECT_EQ(outcome.num_cached_tokens, 3 * kBlockSize);
  EXPECT_EQ(tier_stat(outcome.stats, "disk", &TierStats::checksum_failures), 1);
  // The recomputed page was stored again, whole: a third engine hits every page.
  const Outcome third = run_prompt(*m.model, store_engine_config(dir.path()));
  EXPECT_EQ(third.tokens, want);
  EXPECT_EQ(third.num_cached_tokens, kStoredPages * kBlockSize);
}

TEST(EngineStore, RedisIsSharedAcrossEnginesAndItsOutageIsOnlyMisses) {
  TestModel m = load_test_model("llama", true);
  const std::vector<int32_t> want = reference_tokens(*m.model);
  RedisServer server;
  ASSERT_TRUE(server.ready());
  TempDir a, b, c;
  EXPECT_EQ(run_prompt(*m.model, store_engine_config(a.path(), server.url())).num_cached_tokens, 0);
  // Another machine: its own disk, the same Redis.
  const Outcome shared = run_prompt(*m.model, store_engine_config(b.path(), server.url()));
  EXPECT_EQ(shared.num_cached_tokens, kStoredPages * kBlockSize);
  EXPECT_EQ(shared.tokens, want);
  EXPECT_EQ(tier_stat(shared.stats, "redis", &TierStats::hits), kStoredPages);
  server.kill();
  const Outcome down = run_prompt(*m.model, store_engine_config(c.path(), server.url()));
  EXPECT_EQ(down.num_cached_tokens, 0);
  EXPECT_EQ(down.tokens, want);
  EXPECT_GT(tier_stat(down.stats, "redis", &TierStats::errors), 0);
}

}  // namespace

int run_engine_child() {
  TestModel m = load_test_model("llama", true);
  Outcome outcome;
  {
    EngineCore engine(*m.model, nullptr, store_engine_config(std::getenv("DIKV_DIR")));
    outcome = run_prompt(engine);
    std::ofstream out(std::getenv("DIKV_OUT"));
    out << outcome.num_cached_tokens;
    for (int32_t token : outcome.tokens) out << " " << token;
    out.close();
    if (std::getenv("DIKV_KILL") != nullptr) {
      // Let the writer finish the pages, then die without any clean-up.
      while (engine.stats().kv_store->tiers.back().pages_written < kStoredPages) {
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
      }
      ::raise(SIGKILL);
    }
  }
  return 0;
}

}  // namespace deepinfer::testing
