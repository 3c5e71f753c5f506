// The router's choice of worker: the registry's listing (joins, expiry, other models and roles),
// failed workers skipped until a newer heartbeat, each policy from cluster/ over the workers'
// loads, the seeds' policy holding requests while every worker's quota is spent and placing them
// in arrival order as load drops, the block size and context length taken from the workers (or
// pinned by the router's flags) with workers that disagree refused, and the metrics.
#include "server/worker_selector.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

#include "cluster/seeds_policy.h"

namespace deepinfer::server {
namespace {

WorkerRecord worker(const std::string& host, uint16_t port, int64_t heartbeat = 1) {
  WorkerRecord record;
  record.host = host;
  record.port = port;
  record.id = host + ":" + std::to_string(port);
  record.model = "tiny";
  record.block_size = 4;
  record.max_model_len = 64;
  record.heartbeat = heartbeat;
  return record;
}

WorkerSelector selector(const std::string& policy, double quota_ms = 500, WorkerShape pinned = {}) {
  SeedsPolicyOptions seeds;
  seeds.quota_ms = quota_ms;
  auto made = make_balancer_policy(policy, CostModel{}, seeds);
  EXPECT_TRUE(made.ok());
  WorkerSelectorOptions options;
  options.model = "tiny";
  options.pinned = pinned;
  return WorkerSelector(std::move(*made), options);
}

RoutedRequest request(std::vector<int32_t> prompt, int32_t max_tokens = 4) {
  SamplingParams sampling;
  sampling.max_tokens = max_tokens;
  return routed_request(prompt, sampling, "tiny", "", 4);
}

TEST(WorkerSelector, RoutesOnlyToListedWorkersOfItsModelAndRole) {
  WorkerSelector s = selector("round-robin");
  EXPECT_EQ(s.acquire(request({1, 2, 3})).outcome, WorkerSelector::Outcome::kNoWorker);
  WorkerRecord other_model = worker("127.0.0.1", 3);
  other_model.model = "other";
  WorkerRecord unknown_role = worker("127.0.0.1", 4);
  unknown_role.role = "vision";
  WorkerRecord prefill = worker("127.0.0.1", 5);
  prefill.role = "prefill";
  WorkerRecord encoder = worker("127.0.0.1", 6);  // the EncoderSelector's, without a block size
  encoder.role = "encoder";
  encoder.block_size = 0;
  const std::vector<std::string> log = s.update({worker("127.0.0.1", 1), other_model, unknown_role, prefill, encoder});
  EXPECT_TRUE(s.refused().empty());
  EXPECT_EQ(s.num_registered(), 2u);
  ASSERT_EQ(log.size(), 4u);
  EXPECT_NE(log[0].find("serves model 'other'"), std::string::npos) << log[0];
  EXPECT_NE(log[1].find("unknown role 'vision'"), std::string::npos) << log[1];
  EXPECT_NE(log[2].find("127.0.0.1:1 joined"), std::string::npos) << log[2];
  // A prefill worker without a decode worker: requests run whole on the role-both worker.
  for (int i = 0; i < 3; ++i) {
    const auto chosen = s.acquire(request({1, 2, 3}));
    ASSERT_EQ(chosen.outcome, WorkerSelector::Outcome::kChosen);
    EXPECT_EQ(chosen.lease.id, "127.0.0.1:1");
    EXPECT_EQ(chosen.lease.port, 1);
    EXPECT_EQ(chosen.lease.role, "both");
    s.release(chosen.lease);
  }
}

TEST(WorkerSelector, DisaggregatesWhileLivePrefillAndDecodeWorkersAreListed) {
  WorkerSelector s = selector("least-loaded");
  WorkerRecord prefill = worker("127.0.0.1", 2);
  prefill.role = "prefill";
  std::vector<WorkerRecord> decodes;
  for (uint16_t port : {3, 4}) {
    decodes.push_back(worker("127.0.0.1", port));
    decodes.back().role = "decode";
    decodes.back().kv_port = static_cast<uint16_t>(port + 100);
  }
  decodes[0].load.num_running = 5;  // the decode choice: the fewest running requests
  s.update({worker("127.0.0.1", 1), prefill, decodes[0], decodes[1]});
  const auto chosen = s.acquire(request({1, 2, 3}));
  ASSERT_EQ(chosen.outcome, WorkerSelector::Outcome::kChosen);
  EXPECT_EQ(chosen.lease.id, "127.0.0.1:2");
  EXPECT_EQ(chosen.lease.role, "prefill");
  const std::optional<WorkerLease> decode = s.acquire_decode(request({1, 2, 3}));
  ASSERT_TRUE(decode.has_value());
  EXPECT_EQ(decode->id, "127.0.0.1:4");
  EXPECT_EQ(decode->kv_port, 104);
  EXPECT_EQ(decode->prefill_ms, 0.0);
  EXPECT_EQ(s.acquire_decode(request({1}), {"127.0.0.1:3", "127.0.0.1:4"}), std::nullopt);
  // A continuation whose KV was lost computes its prompt again: a role-both worker may take it
  // when no decode worker is left, and its prompt's compute counts there.
  const std::optional<WorkerLease> recompute =
      s.acquire_decode(request({1}), {"127.0.0.1:3", "127.0.0.1:4"}, /*recomputes_prompt=*/true);
  ASSERT_TRUE(recompute.has_value());
  EXPECT_EQ(recompute->id, "127.0.0.1:1");
  EXPECT_GT(recompute->prefill_ms, 0.0);
  s.release(*recompute);
  EXPECT_EQ(s.acquire_decode(request({1}), {"127.0.0.1:3"}, /*recomputes_prompt=*/true)->id, "127.0.0.1:4");
  s.release(chosen.lease);
  s.release(*decode);
  // n > 1 is disaggregated too: the prefill worker runs sample 0, the decode worker forks the rest.
  SamplingParams two_samples;
  two_samples.n = 2;
  two_samples.max_tokens = 4;
  const auto samples = s.acquire(routed_request(std::vector<int32_t>{1, 2, 3}, two_samples, "tiny", "", 4));
  ASSERT_EQ(samples.outcome, WorkerSelector::Outcome::kChosen);
  EXPECT_EQ(samples.lease.role, "prefill");
  s.release(samples.lease);
  // Every decode worker failed: requests run whole again.
  s.mark_failed("127.0.0.1:3");
  s.mark_failed("127.0.0.1:4");
  EXPECT_EQ(s.acquire(request({1, 2, 3})).lease.id, "127.0.0.1:1");
}

TEST(WorkerSelector, TakesTheBlockSizeAndContextLengthFromTheWorkersAndRefusesOthers) {
  WorkerSelector s = selector("round-robin");
  EXPECT_EQ(s.block_size(), EngineConfig{}.block_size);  // nothing known yet
  EXPECT_EQ(s.max_model_len(), std::nullopt);
  WorkerRecord longer = worker("127.0.0.1", 2);
  longer.max_model_len = 128;
  WorkerRecord other_pages = worker("127.0.0.1", 3);
  other_pages.block_size = 8;
  // :1 comes first by id and sets the shape; the others differ from it.
  std::vector<std::string> log = s.update({worker("127.0.0.1", 1), longer, other_pages});
  EXPECT_EQ(s.block_size(), 4);
  EXPECT_EQ(s.max_model_len(), 64);
  EXPECT_EQ(s.num_registered(), 1u);
  const std::vector<std::string> refused = s.refused();
  ASSERT_EQ(refused.size(), 2u);
  EXPECT_NE(refused[0].find("127.0.0.1:2 has --max-model-len 128 but the workers already routed to have "
                            "--max-model-len 64"),
            std::string::npos)
      << refused[0];
  EXPECT_NE(refused[1].find("127.0.0.1:3 has --block-size 8"), std::string::npos) << refused[1];
  const auto refusals = [](const std::vector<std::string>& lines) {
    return std::count_if(lines.begin(), lines.end(),
                         [](const std::string& l) { return l.find("not routed to") != l.npos; });
  };
  EXPECT_EQ(refusals(log), 2);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(s.acquire(request({1})).lease.id, "127.0.0.1:1");
  // The next listing repeats nothing about the refused workers; a worker routed to keeps the shape
  // even when a newcomer sorts before it.
  WorkerRecord newcomer = worker("127.0.0.0", 9);
  newcomer.max_model_len = 32;
  log = s.update({newcomer, worker("127.0.0.1", 1, 2), longer, other_pages});
  ASSERT_EQ(log.size(), 1u);
  EXPECT_NE(log[0].find("127.0.0.0:9 has --max-model-len 32"), std::string::npos) << log[0];
  EXPECT_EQ(s.max_model_len(), 64);
  std::string text;
  s.render_metrics(text);
  EXPECT_NE(text.find("deepinfer_router_workers{state=\"refused\"} 3"), std::string::npos) << text;
  // Once every worker of the old shape is gone, the next one sets it again.
  log = s.update({longer});
  EXPECT_EQ(s.max_model_len(), 128);
  EXPECT_EQ(s.num_registered(), 1u);
  EXPECT_TRUE(s.refused().empty());
}

TEST(WorkerSelector, ThePinnedShapeRefusesEveryWorkerThatDiffers) {
  WorkerShape pinned;
  pinned.max_model_len = 128;
  WorkerSelector s = selector("round-robin", 500, pinned);
  WorkerRecord matching = worker("127.0.0.1", 2);
  matching.max_model_len = 128;
  s.update({worker("127.0.0.1", 1), matching});
  EXPECT_EQ(s.num_registered(), 1u);
  EXPECT_EQ(s.block_size(), 4);  // not pinned: the worker's
  ASSERT_EQ(s.refused().size(), 1u);
  EXPECT_NE(s.refused()[0].find("127.0.0.1:1 has --max-model-len 64 but the router's --max-model-len is 128"),
            std::string::npos)
      << s.refused()[0];
  EXPECT_EQ(s.acquire(request({1})).lease.id, "127.0.0.1:2");
}

WorkerRecord rank_of(const std::string& group, int32_t rank, uint16_t port) {
  WorkerRecord record = worker("127.0.0.1", port);
  record.dp_group = group;
  record.dp_rank = rank;
  return record;
}

TEST(WorkerSelector, AMultiEngineWorkersRanksComeInRankOrderAfterTheSingleEngines) {
  WorkerSelector s = selector("round-robin");
  s.update({rank_of("127.0.0.1:5", 0, 5), rank_of("127.0.0.1:5", 1, 2), worker("127.0.0.1", 3)});
  std::vector<std::string> order;
  for (int i = 0; i < 3; ++i) order.push_back(s.acquire(request({1})).lease.id);
  EXPECT_EQ(order, (std::vector<std::string>{"127.0.0.1:3", "127.0.0.1:5", "127.0.0.1:2"}));
}

TEST(WorkerSelector, TheSeedsPolicyPullsIntoAMultiEngineWorkerAsOneDpGroup) {
  WorkerSelector s = selector("seeds");
  // Each rank has ~115 ms queued of a 500 ms quota: the group has ~770 ms left, the idle single
  // engine 500. As one group of --group-size 8 the idle engine would take it; as the workers' own
  // groups the two ranks pull it, and the first of them (rank 0, :4) takes the tie.
  WorkerRecord rank0 = rank_of("127.0.0.1:4", 0, 4);
  WorkerRecord rank1 = rank_of("127.0.0.1:4", 1, 2);
  rank0.load.queued_tokens = rank1.load.queued_tokens = 4000;
  s.update({rank0, rank1, worker("127.0.0.1", 1)});
  EXPECT_EQ(s.acquire(request({1, 2, 3})).lease.id, "127.0.0.1:4");
}

TEST(WorkerSelector, AWorkerWhoseKeyExpiredIsNeverChosenAgain) {
  WorkerSelector s = selector("round-robin");
  s.update({worker("127.0.0.1", 1), worker("127.0.0.1", 2)});
  const auto first = s.acquire(request({1}));
  const auto second = s.acquire(request({1}));
  EXPECT_NE(first.lease.id, second.lease.id);
  // The registry no longer lists :2 (its key expired); a request still running there releases
  // its load harmlessly.
  const std::vector<std::string> log = s.update({worker("127.0.0.1", 1, 2)});
  ASSERT_EQ(log.size(), 1u);
  EXPECT_NE(log[0].find("127.0.0.1:2 left the registry"), std::string::npos) << log[0];
  s.release(second.lease);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(s.acquire(request({1})).lease.id, "127.0.0.1:1");
}

TEST(WorkerSelector, AFailedWorkerIsSkippedUntilANewerHeartbeat) {
  WorkerSelector s = selector("round-robin");
  s.update({worker("127.0.0.1", 1, 5), worker("127.0.0.1", 2, 5)});
  s.mark_failed("127.0.0.1:2");
  EXPECT_EQ(s.num_live(), 1u);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(s.acquire(request({1})).lease.id, "127.0.0.1:1");
  s.update({worker("127.0.0.1", 1, 6), worker("127.0.0.1", 2, 5)});  // the same old heartbeat
  EXPECT_EQ(s.num_live(), 1u);
  const std::vector<std::string> log = s.update({worker("127.0.0.1", 1, 7), worker("127.0.0.1", 2, 6)});
  EXPECT_EQ(s.num_live(), 2u);
  ASSERT_EQ(log.size(), 1u);
  EXPECT_NE(log[0].find("alive again"), std::string::npos);
  // A request that failed on :1 is retried elsewhere only: excluding every worker means none.
  EXPECT_EQ(s.acquire(request({1}), {"127.0.0.1:1", "127.0.0.1:2"}).outcome, WorkerSelector::Outcome::kNoWorker);
  EXPECT_EQ(s.acquire(request({1}), {"127.0.0.1:1"}).lease.id, "127.0.0.1:2");
}

TEST(WorkerSelector, LeastLoadedWeighsOutstandingTokensAndTheWorkersReports) {
  WorkerSelector s = selector("least-loaded");
  s.update({worker("127.0.0.1", 1), worker("127.0.0.1", 2)});
  const auto big = s.acquire(request(std::vector<int32_t>(40, 7), 100));
  EXPECT_EQ(big.lease.id, "127.0.0.1:1");  // a tie goes to the first
  EXPECT_EQ(big.lease.tokens, 140);
  EXPECT_EQ(s.acquire(request({1})).lease.id, "127.0.0.1:2");
  EXPECT_EQ(s.acquire(request({1})).lease.id, "127.0.0.1:2");
  s.release(big.lease);
  EXPECT_EQ(s.acquire(request({1})).lease.id, "127.0.0.1:1");
  // Another router's load, seen in a worker's heartbeat, counts too.
  WorkerSelector fresh = selector("least-loaded");
  WorkerRecord busy = worker("127.0.0.1", 1);
  busy.load.queued_tokens = 1000;
  fresh.update({busy, worker("127.0.0.1", 2)});
  EXPECT_EQ(fresh.acquire(request({1})).lease.id, "127.0.0.1:2");
}

TEST(WorkerSelector, PrefixAffinityFollowsThePromptBlocksAWorkerWasSent) {
  WorkerSelector s = selector("prefix-affinity");
  s.update({worker("127.0.0.1", 1), worker("127.0.0.1", 2)});
  const std::vector<int32_t> shared = {1, 2, 3, 4, 5, 6, 7, 8};
  std::vector<int32_t> a = shared, b = shared;
  a.insert(a.end(), {10, 11});
  b.insert(b.end(), {20, 21});
  const auto first = s.acquire(request(a));
  s.release(first.lease);
  // Load alone would pick the other (its queue ties, the first wins): the prefix keeps it here.
  WorkerRecord loaded = worker(first.lease.host, first.lease.port, 2);
  loaded.load.queued_tokens = 3;
  s.update({loaded, worker("127.0.0.1", first.lease.port == 1 ? 2 : 1, 2)});
  EXPECT_EQ(s.acquire(request(b)).lease.id, first.lease.id);
  EXPECT_NE(s.acquire(request({50, 51, 52, 53, 54})).lease.id, first.lease.id);  // nothing cached: least loaded
}

TEST(WorkerSelector, TheSeedsPolicyHoldsWhileEveryQuotaIsSpentThenPlacesInArrivalOrder) {
  // A quota of 1 ms: one request (at least the cost model's 4.2 ms step) spends a worker's quota.
  WorkerSelector s = selector("seeds", 1.0);
  s.update({worker("127.0.0.1", 1), worker("127.0.0.1", 2)});
  const auto a = s.acquire(request({1, 2, 3}));
  const auto b = s.acquire(request({1, 2, 3}));
  ASSERT_EQ(a.outcome, WorkerSelector::Outcome::kChosen);
  ASSERT_EQ(b.outcome, WorkerSelector::Outcome::kChosen);
  EXPECT_NE(a.lease.id, b.lease.id);
  const auto held1 = s.acquire(request({4, 5}));
  const auto held2 = s.acquire(request({6, 7}));
  ASSERT_EQ(held1.outcome, WorkerSelector::Outcome::kHeld);
  ASSERT_EQ(held2.outcome, WorkerSelector::Outcome::kHeld);
  EXPECT_EQ(s.poll_held(held1.ticket).outcome, WorkerSelector::Outcome::kHeld);
  std::string text;
  s.render_metrics(text);
  EXPECT_NE(text.find("deepinfer_router_held_requests 2"), std::string::npos) << text;
  s.release(a.lease);  // a's worker has quota again: the first held request takes it, not the second
  const auto placed = s.poll_held(held1.ticket);
  ASSERT_EQ(placed.outcome, WorkerSelector::Outcome::kChosen);
  EXPECT_EQ(placed.lease.id, a.lease.id);
  EXPECT_EQ(s.poll_held(held2.ticket).outcome, WorkerSelector::Outcome::kHeld);
  // Every worker leaves: the held request learns there is nothing to wait for.
  s.update({});
  EXPECT_EQ(s.poll_held(held2.ticket).outcome, WorkerSelector::Outcome::kNoWorker);
}

TEST(WorkerSelector, MetricsShowPerWorkerLoadDecisionsAndTheBalanceRatio) {
  WorkerSelector s = selector("round-robin");
  WorkerRecord reporting = worker("127.0.0.1", 1);
  reporting.load.num_running = 3;
  reporting.load.kv_usage = 0.25;
  s.update({reporting, worker("127.0.0.1", 2)});
  const auto a = s.acquire(request({1, 2, 3}, 5));  // 8 tokens on :1
  s.mark_failed("127.0.0.1:2");
  std::string text;
  s.render_metrics(text);
  for (const char* line :
       {"deepinfer_router_workers{state=\"registered\"} 2", "deepinfer_router_workers{state=\"live\"} 1",
        "deepinfer_worker_outstanding_tokens{worker=\"127.0.0.1:1\"} 8",
        "deepinfer_worker_outstanding_requests{worker=\"127.0.0.1:1\"} 1",
        "deepinfer_worker_routed_requests_total{worker=\"127.0.0.1:1\"} 1",
        "deepinfer_worker_failures_total{worker=\"127.0.0.1:2\"} 1",
        "deepinfer_worker_reported_running_requests{worker=\"127.0.0.1:1\"} 3",
        "deepinfer_worker_reported_kv_usage_ratio{worker=\"127.0.0.1:1\"} 0.25",
        "deepinfer_router_balance_ratio 2.0"}) {
    EXPECT_NE(text.find(line), std::string::npos) << line << "\n" << text;
  }
  s.release(a.lease);
}

}  // namespace
}  // namespace deepinfer::server
