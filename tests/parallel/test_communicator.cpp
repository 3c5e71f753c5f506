// The Gloo communicator with ranks as threads of one process (each its own TCP pairs, as separate
// processes would have): all_to_all_v moves uneven and empty slices, the reductions and the gather
// agree on every rank, and a rank that leaves makes the others fail with an error naming the group
// instead of hanging. The row exchanges of expert parallelism (runtime/comm/device_exchange.h)
// move what all_to_all_v moves.
#include <gtest/gtest.h>

#include <chrono>

#include "group_threads.h"
#include "core/device_error.h"
#include "runtime/backend.h"
#include "runtime/comm/communicator.h"
#include "runtime/comm/device_exchange.h"

namespace deepinfer {
namespace {

using testing::fresh_rendezvous;
using testing::run_group;

TEST(Communicator, AllToAllVMovesUnevenSlices) {
  constexpr int32_t kRanks = 3;
  run_group(kRanks, "a2a", std::chrono::seconds(30), [](std::shared_ptr<Communicator> group) {
    Communicator& c = *group;
    const int32_t r = c.rank();
    // Rank r sends (r + d) % 3 values to rank d (zero to some), each value 100 r + 10 d + i.
    std::vector<int64_t> send_counts(kRanks);
    std::vector<float> send;
    for (int32_t d = 0; d < kRanks; ++d) {
      send_counts[d] = (r + d) % kRanks;
      for (int64_t i = 0; i < send_counts[d]; ++i) send.push_back(static_cast<float>(100 * r + 10 * d + i));
    }
    const std::vector<int64_t> recv_counts = c.all_to_all_counts(send_counts);
    std::vector<float> recv(static_cast<size_t>(recv_counts[0] + recv_counts[1] + recv_counts[2]));
    c.all_to_all_v(send.data(), send_counts, recv.data(), recv_counts, sizeof(float));
    std::vector<float> want;
    for (int32_t s = 0; s < kRanks; ++s) {
      EXPECT_EQ(recv_counts[s], (s + r) % kRanks);
      for (int64_t i = 0; i < (s + r) % kRanks; ++i) want.push_back(static_cast<float>(100 * s + 10 * r + i));
    }
    EXPECT_EQ(recv, want);
  });
}

TEST(Communicator, ReductionsAndGatherAgree) {
  run_group(4, "reduce", std::chrono::seconds(30), [](std::shared_ptr<Communicator> group) {
    Communicator& c = *group;
    std::vector<int64_t> max_values = {c.rank(), -c.rank()};
    c.all_reduce_max(max_values);
    EXPECT_EQ(max_values, (std::vector<int64_t>{3, 0}));
    std::vector<int64_t> sums = {c.rank(), 1};
    c.all_reduce_sum(sums);
    EXPECT_EQ(sums, (std::vector<int64_t>{6, 4}));
    const std::vector<std::string> all = c.all_gather(c.rank() == 2 ? "" : std::string(c.rank() + 1, 'a' + c.rank()));
    EXPECT_EQ(all, (std::vector<std::string>{"a", "bb", "", "dddd"}));
  });
}

TEST(Communicator, ARankThatLeavesFailsTheOthersWithTheGroupsName) {
  run_group(2, "leaver", std::chrono::seconds(20), [](std::shared_ptr<Communicator> group) {
    Communicator& c = *group;
    std::vector<int64_t> values = {1};
    c.all_reduce_sum(values);   // both joined
    if (c.rank() == 1) return;  // its communicator closes when the thread's body returns
    const auto start = std::chrono::steady_clock::now();
    try {
      for (int i = 0; i < 3; ++i) c.all_reduce_sum(values);
      ADD_FAILURE() << "the collective with a departed rank returned";
    } catch (const DeviceError& e) {
      EXPECT_TRUE(e.lost());
      EXPECT_NE(std::string(e.what()).find("data-parallel group 'leaver'"), std::string::npos) << e.what();
    }
    EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(15)) << "noticed by closing, not timeout";
  });
}

TEST(Communicator, BadOptionsNameTheProblem) {
  GroupOptions options;
  options.world_size = 2;
  options.rank = 2;
  options.rendezvous = fresh_rendezvous("bad");
  auto c = connect_group(options);
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.error().message.find("rank 2 is outside 0..1"), std::string::npos) << c.error().message;
  options.rank = 0;
  options.rendezvous = "redis://localhost:notaport";
  c = connect_group(options);
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.error().message.find("port is not a number"), std::string::npos) << c.error().message;
}

// The host backends' exchange (the group's on their buffers as they are) and the staged one
// (copies to the host and back: the way of ranks sharing a GPU, here through the CPU backend's
// buffers) move rows of uneven, empty and full slices as all_to_all_v does; NCCL is refused.
TEST(DeviceExchange, HostAndStagedExchangesMoveWhatTheGroupMoves) {
  constexpr int32_t kRanks = 3;
  constexpr int64_t kWidth = 5;
  run_group(kRanks, "exchange", std::chrono::seconds(30), [](std::shared_ptr<Communicator> group) {
    const int32_t r = group->rank();
    std::unique_ptr<Backend> backend = make_backend("cpu").value();
    auto host = backend->make_device_exchange(group, ExchangeTransport::kAuto);
    ASSERT_TRUE(host.ok()) << host.error().message;
    EXPECT_EQ((*host)->transport(), "host");
    const std::unique_ptr<DeviceExchange> staged = make_staged_exchange(group, *backend);
    // Rank r sends (2 r + d) % 3 rows to rank d, row i's values 1000 r + 100 d + 10 i + column.
    std::vector<int64_t> send_counts(kRanks);
    std::vector<float> send;
    for (int32_t d = 0; d < kRanks; ++d) {
      send_counts[d] = (2 * r + d) % kRanks;
      for (int64_t i = 0; i < send_counts[d] * kWidth; ++i) {
        send.push_back(static_cast<float>(1000 * r + 100 * d + 10 * (i / kWidth) + i % kWidth));
      }
    }
    const std::vector<int64_t> recv_counts = group->all_to_all_counts(send_counts);
    std::vector<float> want;
    for (int32_t s = 0; s < kRanks; ++s) {
      ASSERT_EQ(recv_counts[s], (2 * s + r) % kRanks);
      for (int64_t i = 0; i < recv_counts[s] * kWidth; ++i) {
        want.push_back(static_cast<float>(1000 * s + 100 * r + 10 * (i / kWidth) + i % kWidth));
      }
    }
    for (DeviceExchange* exchange : {host->get(), staged.get()}) {
      DeviceBuffer device_send = backend->allocate(send.size() * sizeof(float) + 1);
      DeviceBuffer device_recv = backend->allocate(want.size() * sizeof(float) + 1);
      backend->copy_to_device(device_send.data(), send.data(), send.size() * sizeof(float));
      exchange->all_to_all_v(device_send.data(), send_counts, device_recv.data(), recv_counts, kWidth * sizeof(float));
      std::vector<float> got(want.size());
      backend->copy_to_host(got.data(), device_recv.data(), got.size() * sizeof(float));
      EXPECT_EQ(got, want) << "rank " << r;
    }
    auto nccl = backend->make_device_exchange(group, ExchangeTransport::kNccl);
    ASSERT_FALSE(nccl.ok());
    EXPECT_EQ(nccl.error().message,
              "expert-parallel transport nccl: rank 0: NCCL needs --device cuda (this backend's rows are host memory)");
  });
}

// The choice is a collective: a rank that asks for another transport (ranks started by hand with
// different flags) is named, with the same error on every rank, instead of a hang.
TEST(DeviceExchange, RanksThatDisagreeOnTheTransportAreNamedOnEveryRank) {
  run_group(3, "disagree", std::chrono::seconds(30), [](std::shared_ptr<Communicator> group) {
    std::unique_ptr<Backend> backend = make_backend("cpu").value();
    const ExchangeTransport asked = group->rank() == 2 ? ExchangeTransport::kHost : ExchangeTransport::kAuto;
    auto exchange = backend->make_device_exchange(group, asked);
    ASSERT_FALSE(exchange.ok());
    EXPECT_EQ(exchange.error().message,
              "the ranks disagree: rank 0 runs cpu with expert-parallel transport auto, rank 2 runs cpu with "
              "expert-parallel transport host");
  });
}

TEST(DeviceExchange, TransportNamesAreParsedAndUnknownOnesNamed) {
  EXPECT_EQ(parse_exchange_transport("auto").value(), ExchangeTransport::kAuto);
  EXPECT_EQ(parse_exchange_transport("host").value(), ExchangeTransport::kHost);
  EXPECT_EQ(parse_exchange_transport("nccl").value(), ExchangeTransport::kNccl);
  auto gloo = parse_exchange_transport("gloo");
  ASSERT_FALSE(gloo.ok());
  EXPECT_NE(gloo.error().message.find("'gloo' (expected auto, host or nccl)"), std::string::npos)
      << gloo.error().message;
}

TEST(DeviceExchange, PayloadNamesGiveEachDirectionsElementType) {
  const auto expect = [](std::string_view name, bool invariant, DType dispatch, DType combine) {
    const auto payload = parse_exchange_payload(name, invariant);
    ASSERT_TRUE(payload.ok()) << payload.error().message;
    EXPECT_EQ(payload->dispatch, dispatch) << name << " " << invariant;
    EXPECT_EQ(payload->combine, combine) << name << " " << invariant;
  };
  expect("auto", true, DType::kF32, DType::kF32);  // batch invariant: one rank's bits
  expect("auto", false, DType::kBF16, DType::kBF16);
  expect("float32", false, DType::kF32, DType::kF32);
  expect("bf16", true, DType::kBF16, DType::kBF16);
  expect("fp8", false, DType::kF8E4M3, DType::kBF16);  // DeepSeek's: FP8 out, bf16 back
  EXPECT_EQ(exchange_payload_name(parse_exchange_payload("fp8", false).value()), "fp8");
  EXPECT_EQ(exchange_payload_name(parse_exchange_payload("auto", true).value()), "float32");
  auto half = parse_exchange_payload("fp16", false);
  ASSERT_FALSE(half.ok());
  EXPECT_EQ(half.error().message, "unknown expert-parallel payload 'fp16' (expected auto, float32, bf16 or fp8)");
}

}  // namespace
}  // namespace deepinfer
