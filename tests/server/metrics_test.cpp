// The Prometheus text the server's /metrics renders: cumulative histogram buckets, counters by
// label, and the format rules scrapers rely on (HELP and TYPE before each family).
#include "server/metrics.h"

#include <gtest/gtest.h>

#include <sstream>

namespace deepinfer::server {
namespace {

TEST(Histogram, BucketsAreCumulativeWithSumAndCount) {
  Histogram histogram({0.1, 1.0});
  histogram.observe(0.05);
  histogram.observe(0.1);  // on a bound: counted in that bucket (le = less or equal)
  histogram.observe(0.5);
  histogram.observe(7.0);
  std::string out;
  histogram.render("h", out);
  EXPECT_EQ(out,
            "h_bucket{le=\"0.10000000000000001\"} 2\n"
            "h_bucket{le=\"1\"} 3\n"
            "h_bucket{le=\"+Inf\"} 4\n"
            "h_sum 7.6500000000000004\n"
            "h_count 4\n");
}

// Speculative decoding's families: counters by draft position and the acceptance-length histogram,
// cumulative as Prometheus requires.
TEST(Metrics, RendersSpeculativeDecoding) {
  Metrics metrics;
  SpeculativeStats spec;
  spec.verify_steps = 10;
  spec.verify_rows = 45;
  spec.draft_calls = 30;
  spec.proposed_per_position = {20, 12};
  spec.accepted_per_position = {15, 6};
  spec.accepted_length = {5, 9, 6};
  metrics.set_engine(EngineGauges{0, 0, 0.0, 0, 0, 0, 0, std::nullopt, spec});
  const std::string text = metrics.render();
  for (const char* line : {"deepinfer_spec_verify_steps_total 10\n", "deepinfer_spec_verify_rows_total 45\n",
                           "deepinfer_spec_draft_tokens_total{position=\"2\"} 12\n",
                           "deepinfer_spec_accepted_tokens_total{position=\"1\"} 15\n",
                           "deepinfer_spec_acceptance_length_bucket{le=\"0\"} 5\n",
                           "deepinfer_spec_acceptance_length_bucket{le=\"1\"} 14\n",
                           "deepinfer_spec_acceptance_length_bucket{le=\"+Inf\"} 20\n",
                           "deepinfer_spec_acceptance_length_sum 21\n", "deepinfer_spec_acceptance_length_count 20\n",
                           "# TYPE deepinfer_spec_acceptance_length histogram\n"}) {
    EXPECT_NE(text.find(line), std::string::npos) << line;
  }
  metrics.set_engine(EngineGauges{});
  EXPECT_EQ(metrics.render().find("deepinfer_spec_"), std::string::npos);
}

TEST(Metrics, RendersEveryFamilyOnceWithHelpAndType) {
  Metrics metrics;
  metrics.record_request("/v1/chat/completions", 200);
  metrics.record_request("/v1/chat/completions", 200);
  metrics.record_request("/v1/messages", 529);
  metrics.add_prompt_tokens(12);
  metrics.add_generation_tokens(5);
  metrics.set_engine(EngineGauges{3, 2, 0.25, 100, 64, 1, 40, std::nullopt, std::nullopt});
  metrics.observe_ttft(0.2);
  const std::string text = metrics.render();
  EXPECT_NE(text.find("deepinfer_requests_total{endpoint=\"/v1/chat/completions\",status=\"200\"} 2\n"), std::string::npos);
  EXPECT_NE(text.find("deepinfer_requests_total{endpoint=\"/v1/messages\",status=\"529\"} 1\n"), std::string::npos);
  EXPECT_NE(text.find("deepinfer_num_requests_waiting 3\n"), std::string::npos);
  EXPECT_NE(text.find("deepinfer_num_requests_running 2\n"), std::string::npos);
  EXPECT_NE(text.find("deepinfer_kv_cache_usage_ratio 0.25\n"), std::string::npos);
  EXPECT_NE(text.find("deepinfer_prompt_tokens_total 12\n"), std::string::npos);
  EXPECT_NE(text.find("deepinfer_generation_tokens_total 5\n"), std::string::npos);
  EXPECT_NE(text.find("deepinfer_prefix_cache_queries_tokens_total 100\n"), std::string::npos);
  EXPECT_NE(text.find("deepinfer_prefix_cache_hits_tokens_total 64\n"), std::string::npos);
  EXPECT_NE(text.find("deepinfer_num_preemptions_total 1\n"), std::string::npos);
  EXPECT_NE(text.find("deepinfer_overlapped_steps_total 40\n"), std::string::npos);
  EXPECT_NE(text.find("deepinfer_time_to_first_token_seconds_count 1\n"), std::string::npos);
  // Every sample line belongs to a family declared just before with # TYPE.
  std::istringstream lines(text);
  std::string line;
  std::string family;
  while (std::getline(lines, line)) {
    if (line.starts_with("# TYPE ")) {
      family = line.substr(7, line.find(' ', 7) - 7);
      continue;
    }
    if (line.starts_with("#")) continue;
    ASSERT_FALSE(family.empty()) << line;
    EXPECT_TRUE(line.starts_with(family)) << line << " outside family " << family;
  }
}

TEST(Metrics, RendersKvStoreCountersByTierOnlyWhenTheStoreIsOn) {
  Metrics metrics;
  EXPECT_EQ(metrics.render().find("deepinfer_kv_store"), std::string::npos);
  KvStoreStats store;
  TierStats host;
  host.name = "host";
  host.hits = 7;
  host.num_pages = 3;
  TierStats disk;
  disk.name = "disk";
  disk.hits = 2;
  disk.misses = 5;
  disk.bytes_read = 4096;
  disk.bytes_written = 8192;
  disk.evictions = 1;
  disk.expirations = 4;
  disk.checksum_failures = 6;
  disk.errors = 9;
  disk.used_bytes = 123456;
  store.tiers = {host, disk};
  store.queue_drops = 11;
  store.pages_loaded = 12;
  store.loads_skipped_by_cost = 13;
  store.tokens_replayed = 14;
  store.host_pool_fallbacks = 15;
  EngineGauges gauges;
  gauges.kv_store = store;
  metrics.set_engine(gauges);
  const std::string text = metrics.render();
  for (const char* expected : {
           "deepinfer_kv_store_hits_total{tier=\"host\"} 7\n", "deepinfer_kv_store_hits_total{tier=\"disk\"} 2\n",
           "deepinfer_kv_store_misses_total{tier=\"disk\"} 5\n", "deepinfer_kv_store_bytes_read_total{tier=\"disk\"} 4096\n",
           "deepinfer_kv_store_bytes_written_total{tier=\"disk\"} 8192\n",
           "deepinfer_kv_store_evictions_total{tier=\"disk\"} 1\n",
           "deepinfer_kv_store_expirations_total{tier=\"disk\"} 4\n",
           "deepinfer_kv_store_checksum_failures_total{tier=\"disk\"} 6\n",
           "deepinfer_kv_store_errors_total{tier=\"disk\"} 9\n", "deepinfer_kv_store_pages{tier=\"host\"} 3\n",
           "deepinfer_kv_store_bytes{tier=\"disk\"} 123456\n", "deepinfer_kv_store_queue_drops_total 11\n",
           "deepinfer_kv_store_pages_loaded_total 12\n", "deepinfer_kv_store_loads_skipped_by_cost_total 13\n",
           "deepinfer_kv_store_tokens_replayed_total 14\n", "deepinfer_kv_store_host_pool_fallbacks_total 15\n",
           "# TYPE deepinfer_kv_store_pages gauge\n", "# TYPE deepinfer_kv_store_hits_total counter\n"}) {
    EXPECT_NE(text.find(expected), std::string::npos) << expected;
  }
}

}  // namespace
}  // namespace deepinfer::server
