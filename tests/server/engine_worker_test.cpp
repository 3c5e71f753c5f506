// The server's engine thread on the tiny Qwen3 fixture: outputs reach the request's channel in
// order and match the offline API's tokens; aborts, refused requests and a client that stops
// reading all end with the engine idle and its KV freed.
#include "server/engine_worker.h"

#include <gtest/gtest.h>

#include <boost/asio/io_context.hpp>
#include <chrono>
#include <thread>

#include "deepinfer/llm.h"
#include "model/model.h"

namespace deepinfer::server {
namespace {

const std::string kModelDir = std::string(DEEPINFER_TEST_DATA_DIR) + "/qwen3";

struct Fixture {
  std::unique_ptr<Backend> backend = make_backend("cpu").value();
  std::unique_ptr<CausalLM> model = load_model(kModelDir, *backend, false).value();
  EngineCore engine{*model, nullptr, [] {
                      EngineConfig config;
                      config.block_size = 16;
                      config.kv_cache_bytes = 8 << 20;
                      return config;
                    }()};
  Metrics metrics;
  boost::asio::io_context io;
};

SamplingParams greedy(int32_t max_tokens) {
  SamplingParams params;
  params.temperature = 0.0;
  params.max_tokens = max_tokens;
  params.ignore_eos = true;
  return params;
}

// Receives until the finished output, the channel closes, or 20 s pass.
std::vector<EngineEvent> drain(OutputChannel& channel) {
  std::vector<EngineEvent> events;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  bool open = true;
  while (open && std::chrono::steady_clock::now() < deadline) {
    const bool got = channel.try_receive([&](boost::system::error_code error, EngineEvent event) {
      if (error) open = false;
      else events.push_back(std::move(event));
    });
    if (!events.empty() && events.back().output.finished) break;
    if (!got) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return events;
}

void wait_idle(const Metrics& metrics) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (std::chrono::steady_clock::now() < deadline) {
    const EngineGauges g = metrics.engine();
    if (g.num_running == 0 && g.num_waiting == 0 && g.kv_usage == 0.0) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  FAIL() << "engine not idle";
}

TEST(EngineWorker, OutputsMatchTheOfflineApi) {
  const std::vector<int32_t> prompt = {1, 2, 3, 4, 5, 6, 7, 8};
  LLMConfig config;
  config.model_dir = kModelDir;
  config.show_progress = false;
  auto llm = LLM::open(config).value();
  const auto expected = llm->generate({Prompt{"", prompt}}, {greedy(10)}).value();

  Fixture f;
  EngineWorker worker(f.engine, f.metrics, WorkerLimits{.check_invariants = true});
  auto channel = std::make_shared<OutputChannel>(f.io.get_executor(), 64);
  ASSERT_TRUE(worker.submit(Submission{prompt, greedy(10), 0, "", channel}).has_value());
  std::vector<int32_t> tokens;
  const auto events = drain(*channel);
  ASSERT_FALSE(events.empty());
  for (const EngineEvent& event : events) {
    ASSERT_FALSE(event.error.has_value());
    for (const SampleOutput& sample : event.output.samples) {
      tokens.insert(tokens.end(), sample.new_token_ids.begin(), sample.new_token_ids.end());
    }
  }
  EXPECT_TRUE(events.back().output.finished);
  EXPECT_EQ(tokens, expected[0].outputs[0].token_ids);
  wait_idle(f.metrics);
}

TEST(EngineWorker, RefusedRequestGetsTheEngineError) {
  Fixture f;
  EngineWorker worker(f.engine, f.metrics, WorkerLimits{});
  auto channel = std::make_shared<OutputChannel>(f.io.get_executor(), 4);
  ASSERT_TRUE(worker.submit(Submission{{1, 2, 100000}, greedy(4), 0, "", channel}).has_value());
  const auto events = drain(*channel);
  ASSERT_EQ(events.size(), 1u);
  ASSERT_TRUE(events[0].error.has_value());
  EXPECT_NE(events[0].error->message.find("100000"), std::string::npos) << events[0].error->message;
  // The refused request left the queue: another is admitted at once.
  auto next = std::make_shared<OutputChannel>(f.io.get_executor(), 64);
  EXPECT_TRUE(worker.submit(Submission{{1, 2, 3}, greedy(2), 0, "", next}).has_value());
  EXPECT_TRUE(drain(*next).back().output.finished);
}

TEST(EngineWorker, AbortEndsTheRequestAndFreesItsBlocks) {
  Fixture f;
  EngineWorker worker(f.engine, f.metrics, WorkerLimits{.check_invariants = true});
  auto channel = std::make_shared<OutputChannel>(f.io.get_executor(), 4096);
  const auto id = worker.submit(Submission{{1, 2, 3, 4}, greedy(2000), 0, "", channel});
  ASSERT_TRUE(id.has_value());
  worker.abort(*id);
  const auto events = drain(*channel);
  ASSERT_FALSE(events.empty());
  ASSERT_TRUE(events.back().output.finished);
  EXPECT_EQ(events.back().output.samples.at(0).finish_reason, FinishReason::kAbort);
  wait_idle(f.metrics);
}

TEST(EngineWorker, ClientThatStopsReadingIsAbortedNotWaitedOn) {
  Fixture f;
  EngineWorker worker(f.engine, f.metrics, WorkerLimits{.check_invariants = true});
  auto slow = std::make_shared<OutputChannel>(f.io.get_executor(), 2);  // never read below
  ASSERT_TRUE(worker.submit(Submission{{1, 2, 3, 4}, greedy(2000), 0, "", slow}).has_value());
  // Another request runs to the end meanwhile.
  auto fast = std::make_shared<OutputChannel>(f.io.get_executor(), 64);
  ASSERT_TRUE(worker.submit(Submission{{5, 6, 7}, greedy(6), 0, "", fast}).has_value());
  EXPECT_TRUE(drain(*fast).back().output.finished);
  wait_idle(f.metrics);
  const EngineGauges gauges = f.metrics.engine();
  EXPECT_EQ(gauges.num_running, 0);
  EXPECT_FALSE(slow->is_open());
}

TEST(EngineWorker, QueueBoundRefusesWhenFull) {
  Fixture f;
  // With a bound of one queued request, a burst submitted faster than the engine thread can
  // start them is refused past the first that waits (the engine runs one step at a time).
  EngineWorker worker(f.engine, f.metrics, WorkerLimits{.max_queued_requests = 1});
  std::vector<std::shared_ptr<OutputChannel>> channels;
  int refused = 0;
  for (int i = 0; i < 50; ++i) {
    channels.push_back(std::make_shared<OutputChannel>(f.io.get_executor(), 4096));
    if (!worker.submit(Submission{{1, 2, 3, 4, 5, 6, 7, 8}, greedy(50), 0, "", channels.back()})) ++refused;
  }
  EXPECT_GT(refused, 0);
  for (auto& channel : channels) channel->close();
  wait_idle(f.metrics);
}

TEST(EngineWorker, QueuedTokenBoundRefusesButNeverALoneRequest) {
  Fixture f;
  EngineWorker worker(f.engine, f.metrics, WorkerLimits{.max_queued_tokens = 10});
  auto first = std::make_shared<OutputChannel>(f.io.get_executor(), 4096);
  auto second = std::make_shared<OutputChannel>(f.io.get_executor(), 4096);
  // 12 prompt tokens alone pass a bound of 10 (an empty queue admits anything)...
  const std::vector<int32_t> prompt = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
  ASSERT_TRUE(worker.submit(Submission{prompt, greedy(4), 0, "", first}).has_value());
  // ...and 12 more behind them, submitted before the engine thread can start the first, do not.
  EXPECT_FALSE(worker.submit(Submission{prompt, greedy(4), 0, "", second}).has_value());
  EXPECT_TRUE(drain(*first).back().output.finished);
  wait_idle(f.metrics);
}

}  // namespace
}  // namespace deepinfer::server
