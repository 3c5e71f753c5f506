// Expert-parallel row exchanges on the CUDA backend (runtime/comm/device_exchange.h), on the one
// GPU this machine has. Two ranks as threads sharing it: auto stages the rows through host copies
// and moves what all_to_all_v moves; nccl is refused, naming the shared GPU. A one-rank group is
// the only NCCL group one GPU can hold: its exchange moves rows, and the qwen3_moe fixture under
// expert parallelism over it gives the one-device logits bit for bit (batch invariant; the one-device
// logits are checked against transformers elsewhere). Two GPUs over NCCL: issue 24.
#include <gtest/gtest.h>

#include <chrono>

#include "cuda_test_util.h"
#include "group_threads.h"
#include "model/expert_parallel.h"
#include "runtime/comm/device_exchange.h"
#include "runtime/cuda/nccl_exchange.h"

namespace deepinfer {
namespace {

constexpr int64_t kWidth = 7;

// Rank r of n sends (r + d) % n + 1 rows of kWidth floats to rank d, row i of it holding
// 1000 r + 100 d + 10 i + column, and checks what arrives.
void expect_exchange_moves_rows(Backend& backend, DeviceExchange& exchange, int32_t r, int32_t n) {
  std::vector<int64_t> send_counts, recv_counts;
  std::vector<float> send, want;
  for (int32_t d = 0; d < n; ++d) {
    send_counts.push_back((r + d) % n + 1);
    recv_counts.push_back((d + r) % n + 1);
    for (int64_t i = 0; i < send_counts.back() * kWidth; ++i) {
      send.push_back(static_cast<float>(1000 * r + 100 * d + 10 * (i / kWidth) + i % kWidth));
    }
    for (int64_t i = 0; i < recv_counts.back() * kWidth; ++i) {
      want.push_back(static_cast<float>(1000 * d + 100 * r + 10 * (i / kWidth) + i % kWidth));
    }
  }
  DeviceBuffer device_send = backend.allocate(send.size() * sizeof(float));
  DeviceBuffer device_recv = backend.allocate(want.size() * sizeof(float));
  backend.copy_to_device(device_send.data(), send.data(), send.size() * sizeof(float));
  exchange.all_to_all_v(device_send.data(), send_counts, device_recv.data(), recv_counts, kWidth * sizeof(float));
  std::vector<float> got(want.size());
  backend.copy_to_host(got.data(), device_recv.data(), got.size() * sizeof(float));
  EXPECT_EQ(got, want) << "rank " << r << " over " << exchange.transport();
}

TEST(CudaExchange, RanksSharingTheGpuStageRowsThroughTheHost) {
  testing::run_group(2, "cuda-shared", std::chrono::seconds(60), [](std::shared_ptr<Communicator> group) {
    std::unique_ptr<Backend> backend = testing::cuda_backend();
    auto nccl = backend->make_device_exchange(group, ExchangeTransport::kNccl);
    ASSERT_FALSE(nccl.ok());
    const std::string why = nccl_available().ok() ? "share the GPU " : "NCCL";
    EXPECT_NE(nccl.error().message.find(why), std::string::npos) << nccl.error().message;
    auto shared = backend->make_device_exchange(group, ExchangeTransport::kAuto);
    ASSERT_TRUE(shared.ok()) << shared.error().message;
    EXPECT_EQ((*shared)->transport(), "host");
    expect_exchange_moves_rows(*backend, **shared, group->rank(), group->world_size());
  });
}

TEST(CudaExchange, AOneRankGroupExchangesThroughNccl) {
  if (auto nccl = nccl_available(); !nccl.ok()) GTEST_SKIP() << nccl.error().message;
  testing::run_group(1, "cuda-nccl", std::chrono::seconds(60), [](std::shared_ptr<Communicator> group) {
    std::unique_ptr<Backend> backend = testing::cuda_backend();
    auto exchange = backend->make_device_exchange(group, ExchangeTransport::kAuto);
    ASSERT_TRUE(exchange.ok()) << exchange.error().message;
    EXPECT_EQ((*exchange)->transport(), "nccl");
    expect_exchange_moves_rows(*backend, **exchange, 0, 1);
  });
}

// A 12-token prompt, then one more token: both forwards' logits.
std::vector<float> two_forwards(CausalLM& model) {
  const std::vector<int32_t> prompt = {1, 5, 9, 22, 7, 3, 100, 42, 17, 250, 64, 2};
  constexpr int32_t kBlocks = 2;
  model.allocate_kv_cache({kBlocks, 16, 0});
  const int64_t vocab = model.config().vocab_size;
  std::vector<float> logits(static_cast<size_t>(prompt.size() + 1) * vocab);
  model.forward(contiguous_sequence_batch(prompt, 0, kBlocks), logits.data());
  model.forward(contiguous_sequence_batch({33}, static_cast<int32_t>(prompt.size()), kBlocks),
                logits.data() + prompt.size() * vocab);
  return logits;
}

TEST(CudaExchange, ExpertParallelismOverNcclGivesTheOneDeviceLogits) {
  if (auto nccl = nccl_available(); !nccl.ok()) GTEST_SKIP() << nccl.error().message;
  const std::string dir = std::string(DEEPINFER_TEST_DATA_DIR) + "/qwen3_moe";
  testing::CudaModel one = testing::load_on_cuda(dir, /*batch_invariant=*/true);
  const std::vector<float> want = two_forwards(*one.model);
  testing::run_group(1, "cuda-ep", std::chrono::seconds(60), [&](std::shared_ptr<Communicator> group) {
    auto expert_parallel = std::make_shared<ExpertParallelism>();
    expert_parallel->group = std::move(group);
    expert_parallel->num_redundant_experts = 2;  // copies of experts 0 and 1 take turns
    expert_parallel->transport = ExchangeTransport::kNccl;
    std::unique_ptr<Backend> backend = testing::cuda_backend(/*batch_invariant=*/true);
    auto model = load_model(dir, *backend, false, expert_parallel);
    ASSERT_TRUE(model.ok()) << model.error().message;
    EXPECT_EQ(two_forwards(**model), want);
  });
}

}  // namespace
}  // namespace deepinfer
