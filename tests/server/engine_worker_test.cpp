// The server's engine thread on the tiny Qwen3 fixture: outputs reach the request's channel in
// order and match the offline API's tokens; aborts, refused requests and a client that stops
// reading all end with the engine idle and its KV freed. Failures injected into the backend
// (runtime/fault_injection.h) end only the requests of the failed step, a lost device ends every
// request and refuses the later ones (both also with async scheduling, the failing pass then
// running on the model runner's thread), and shutdown ends the open requests with an error.
#include "server/engine_worker.h"

#include <gtest/gtest.h>

#include <boost/asio/io_context.hpp>
#include <chrono>
#include <numeric>
#include <thread>

#include "deepinfer/llm.h"
#include "greedy_params.h"
#include "model/model.h"
#include "runtime/fault_injection.h"

namespace deepinfer::server {
namespace {

const std::string kModelDir = std::string(DEEPINFER_TEST_DATA_DIR) + "/qwen3";

EngineConfig small_engine(int32_t max_num_seqs, bool pipelined) {
  EngineConfig config;
  config.block_size = 16;
  config.kv_cache_bytes = 8 << 20;
  config.scheduler.max_num_seqs = max_num_seqs;
  config.async_scheduling = pipelined;
  return config;
}

// The backend goes through the failure-injection wrapper; it fails nothing until faults is armed.
struct Fixture {
  explicit Fixture(int32_t max_num_seqs = 64, bool pipelined = false)
      : engine(*model, nullptr, small_engine(max_num_seqs, pipelined)) {}
  std::shared_ptr<FaultSwitch> faults = std::make_shared<FaultSwitch>();
  std::unique_ptr<Backend> backend = wrap_with_faults(make_backend("cpu").value(), faults);
  std::unique_ptr<CausalLM> model = load_model(kModelDir, *backend, false).value();
  EngineCore engine;
  Metrics metrics;
  boost::asio::io_context io;
};

bool admitted(const Admission& admission) { return std::holds_alternative<int64_t>(admission); }

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

std::vector<int32_t> tokens_of(const std::vector<EngineEvent>& events) {
  std::vector<int32_t> tokens;
  for (const EngineEvent& event : events) {
    for (const SampleOutput& sample : event.output.samples) {
      tokens.insert(tokens.end(), sample.new_token_ids.begin(), sample.new_token_ids.end());
    }
  }
  return tokens;
}

// The tokens the offline API gives for prompt (greedy).
std::vector<int32_t> offline_tokens(const std::vector<int32_t>& prompt, int32_t max_tokens) {
  LLMConfig config;
  config.model_dir = kModelDir;
  config.show_progress = false;
  auto llm = LLM::open(config).value();
  return llm->generate({Prompt{"", prompt}}, {testing::greedy_params(max_tokens)}).value()[0].outputs[0].token_ids;
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
  const std::vector<int32_t> expected = offline_tokens(prompt, 10);

  Fixture f;
  EngineWorker worker(f.engine, f.metrics, WorkerLimits{.check_invariants = true});
  auto channel = std::make_shared<OutputChannel>(f.io.get_executor(), 64);
  ASSERT_TRUE(admitted(worker.submit(Submission{prompt, testing::greedy_params(10), 0, "", channel})));
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
  EXPECT_EQ(tokens, expected);
  wait_idle(f.metrics);
}

TEST(EngineWorker, RefusedRequestGetsTheEngineError) {
  Fixture f;
  EngineWorker worker(f.engine, f.metrics, WorkerLimits{});
  auto channel = std::make_shared<OutputChannel>(f.io.get_executor(), 4);
  ASSERT_TRUE(admitted(worker.submit(Submission{{1, 2, 100000}, testing::greedy_params(4), 0, "", channel})));
  const auto events = drain(*channel);
  ASSERT_EQ(events.size(), 1u);
  ASSERT_TRUE(events[0].error.has_value());
  EXPECT_NE(events[0].error->message.find("100000"), std::string::npos) << events[0].error->message;
  // The refused request left the queue: another is admitted at once.
  auto next = std::make_shared<OutputChannel>(f.io.get_executor(), 64);
  EXPECT_TRUE(admitted(worker.submit(Submission{{1, 2, 3}, testing::greedy_params(2), 0, "", next})));
  EXPECT_TRUE(drain(*next).back().output.finished);
}

TEST(EngineWorker, AbortEndsTheRequestAndFreesItsBlocks) {
  Fixture f;
  EngineWorker worker(f.engine, f.metrics, WorkerLimits{.check_invariants = true});
  auto channel = std::make_shared<OutputChannel>(f.io.get_executor(), 4096);
  const Admission admission = worker.submit(Submission{{1, 2, 3, 4}, testing::greedy_params(2000), 0, "", channel});
  ASSERT_TRUE(admitted(admission));
  worker.abort(std::get<int64_t>(admission));
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
  ASSERT_TRUE(admitted(worker.submit(Submission{{1, 2, 3, 4}, testing::greedy_params(2000), 0, "", slow})));
  // Another request runs to the end meanwhile.
  auto fast = std::make_shared<OutputChannel>(f.io.get_executor(), 64);
  ASSERT_TRUE(admitted(worker.submit(Submission{{5, 6, 7}, testing::greedy_params(6), 0, "", fast})));
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
    Submission submission{{1, 2, 3, 4, 5, 6, 7, 8}, testing::greedy_params(50), 0, "", channels.back()};
    if (!admitted(worker.submit(std::move(submission)))) ++refused;
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
  // 12 prompt + 4 output tokens alone pass a bound of 10 (an empty queue admits anything)...
  const std::vector<int32_t> prompt = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
  ASSERT_TRUE(admitted(worker.submit(Submission{prompt, testing::greedy_params(4), 0, "", first})));
  // ...and 12 more behind them, submitted before the engine thread can start the first, do not.
  EXPECT_FALSE(admitted(worker.submit(Submission{prompt, testing::greedy_params(4), 0, "", second})));
  EXPECT_TRUE(drain(*first).back().output.finished);
  wait_idle(f.metrics);
}

TEST(EngineWorker, QueuedTokenBoundChargesEverySample) {
  Fixture f;
  EngineWorker worker(f.engine, f.metrics, WorkerLimits{.max_queued_tokens = 100});
  std::vector<std::shared_ptr<OutputChannel>> channels;  // of the admitted requests
  const auto submit = [&](int32_t n) {
    auto channel = std::make_shared<OutputChannel>(f.io.get_executor(), 4096);
    SamplingParams params = testing::greedy_params(4);
    params.n = n;
    Admission admission = worker.submit(Submission{{1, 2, 3, 4}, params, 0, "", channel});
    if (admitted(admission)) channels.push_back(channel);
    return admission;
  };
  // Queued before the engine thread can start it: 1 x (4 + 4) tokens.
  ASSERT_TRUE(admitted(submit(1)));
  // 20 x (4 + 4) = 160 tokens do not fit beside it, though the prompt alone (4) would...
  const Admission many = submit(20);
  ASSERT_FALSE(admitted(many));
  EXPECT_TRUE(std::get<Refusal>(many).overloaded);
  EXPECT_NE(std::get<Refusal>(many).message.find("160"), std::string::npos) << std::get<Refusal>(many).message;
  // ...and 8 more still do.
  EXPECT_TRUE(admitted(submit(1)));
  for (auto& channel : channels) drain(*channel);
  wait_idle(f.metrics);
}

class EngineWorkerLoops : public ::testing::TestWithParam<bool> {};

// Both step loops: with async scheduling the failing second pass is the continuation step the
// runner's thread ran while the engine thread post-processed the first.
TEST_P(EngineWorkerLoops, FailedStepEndsItsRequestWithTheMessageAndTheNextOneRuns) {
  Fixture f(64, GetParam());
  EngineWorker worker(f.engine, f.metrics, WorkerLimits{.check_invariants = true});
  // The second forward pass throws: the request's first token is out, the second never comes.
  f.faults->arm(FaultSpec{FaultKind::kThrow, "embedding", 2});
  auto failing = std::make_shared<OutputChannel>(f.io.get_executor(), 64);
  ASSERT_TRUE(admitted(worker.submit(Submission{{1, 2, 3, 4}, testing::greedy_params(20), 0, "", failing})));
  const auto events = drain(*failing);
  ASSERT_GE(events.size(), 2u);
  EXPECT_EQ(tokens_of(events).size(), 1u);
  ASSERT_TRUE(events.back().error.has_value());
  EXPECT_EQ(events.back().error_status, 500);
  // The engine pinned the failure on this request (not the worker's fallback that fails them all).
  EXPECT_EQ(events.back().error->message.rfind("the engine failed while running this request: injected fault", 0), 0u)
      << events.back().error->message;
  wait_idle(f.metrics);
  // The engine is whole again: a new request gives the offline API's tokens.
  const std::vector<int32_t> prompt = {5, 6, 7, 8, 9};
  auto next = std::make_shared<OutputChannel>(f.io.get_executor(), 64);
  ASSERT_TRUE(admitted(worker.submit(Submission{prompt, testing::greedy_params(6), 0, "", next})));
  const auto served = drain(*next);
  ASSERT_FALSE(served.back().error.has_value()) << served.back().error->message;
  EXPECT_EQ(tokens_of(served), offline_tokens(prompt, 6));
  wait_idle(f.metrics);
  // /metrics counts the steps the pipelined loop overlapped, and only there.
  EXPECT_EQ(f.metrics.engine().num_overlapped_steps > 0, GetParam());
}

// The second forward pass loses the device (pipelined: on the runner's thread).
TEST_P(EngineWorkerLoops, LostDeviceFailsTheRequestAndRefusesEveryLaterOne) {
  Fixture f(64, GetParam());
  EngineWorker worker(f.engine, f.metrics, WorkerLimits{});
  EXPECT_FALSE(worker.unavailable().has_value());
  f.faults->arm(FaultSpec{FaultKind::kDeviceLost, "embedding", 2});
  auto channel = std::make_shared<OutputChannel>(f.io.get_executor(), 64);
  ASSERT_TRUE(admitted(worker.submit(Submission{{1, 2, 3, 4}, testing::greedy_params(4), 0, "", channel})));
  const auto events = drain(*channel);
  ASSERT_TRUE(events.back().error.has_value());
  EXPECT_EQ(events.back().error_status, 503);
  EXPECT_NE(events.back().error->message.find("device"), std::string::npos) << events.back().error->message;
  ASSERT_TRUE(worker.unavailable().has_value());
  EXPECT_NE(worker.unavailable()->find("the device is lost"), std::string::npos) << *worker.unavailable();
  auto later = std::make_shared<OutputChannel>(f.io.get_executor(), 64);
  const Admission refused = worker.submit(Submission{{1, 2, 3}, testing::greedy_params(2), 0, "", later});
  ASSERT_FALSE(admitted(refused));
  EXPECT_FALSE(std::get<Refusal>(refused).overloaded);
}

INSTANTIATE_TEST_SUITE_P(SyncAndPipelined, EngineWorkerLoops, ::testing::Bool(),
                         [](const auto& info) { return info.param ? "pipelined" : "synchronous"; });

TEST(EngineWorker, FailedAllocationFailsItsBatchWhileAWaitingRequestRuns) {
  std::vector<int32_t> prompt(40);
  std::iota(prompt.begin(), prompt.end(), 1);
  const std::vector<int32_t> expected = offline_tokens(prompt, 8);
  Fixture f(1);  // one sequence at a time: the second request waits outside the failing batch
  EngineWorker worker(f.engine, f.metrics, WorkerLimits{.check_invariants = true});
  auto warm = std::make_shared<OutputChannel>(f.io.get_executor(), 64);
  ASSERT_TRUE(admitted(worker.submit(Submission{{1, 2, 3}, testing::greedy_params(2), 0, "", warm})));
  ASSERT_FALSE(drain(*warm).back().error.has_value());
  // The 40-token prompt needs a larger workspace than the 3-token one left: that allocation fails.
  f.faults->arm(FaultSpec{FaultKind::kBadAlloc, "allocate", 1});
  auto failing = std::make_shared<OutputChannel>(f.io.get_executor(), 64);
  auto waiting = std::make_shared<OutputChannel>(f.io.get_executor(), 64);
  ASSERT_TRUE(admitted(worker.submit(Submission{prompt, testing::greedy_params(8), 0, "", failing})));
  ASSERT_TRUE(admitted(worker.submit(Submission{prompt, testing::greedy_params(8), 0, "", waiting})));
  const auto failed = drain(*failing);
  ASSERT_TRUE(failed.back().error.has_value());
  EXPECT_EQ(failed.back().error_status, 500);
  EXPECT_NE(failed.back().error->message.find("bad_alloc"), std::string::npos) << failed.back().error->message;
  const auto served = drain(*waiting);
  ASSERT_FALSE(served.back().error.has_value()) << served.back().error->message;
  EXPECT_EQ(tokens_of(served), expected);
  wait_idle(f.metrics);
}

TEST(EngineWorker, ShutdownEndsOpenRequestsWithAnErrorAndFreesTheirBlocks) {
  Fixture f;
  EngineWorker worker(f.engine, f.metrics, WorkerLimits{});
  auto running = std::make_shared<OutputChannel>(f.io.get_executor(), 4096);
  ASSERT_TRUE(admitted(worker.submit(Submission{{1, 2, 3, 4}, testing::greedy_params(2000), 0, "", running})));
  while (f.metrics.engine().num_running == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  worker.shutdown("the server is shutting down");
  const auto events = drain(*running);
  ASSERT_FALSE(events.empty());
  ASSERT_TRUE(events.back().error.has_value());
  EXPECT_EQ(events.back().error_status, 503);
  EXPECT_EQ(events.back().error->message, "the server is shutting down");
  ASSERT_TRUE(worker.stop(std::chrono::steady_clock::now() + std::chrono::seconds(20)));
  // The engine thread aborted the request on its way out: its blocks are free.
  EXPECT_EQ(f.engine.stats().kv_usage, 0.0);
  f.engine.check_invariants();
  auto later = std::make_shared<OutputChannel>(f.io.get_executor(), 64);
  EXPECT_FALSE(admitted(worker.submit(Submission{{1, 2, 3}, testing::greedy_params(2), 0, "", later})));
}

}  // namespace
}  // namespace deepinfer::server
