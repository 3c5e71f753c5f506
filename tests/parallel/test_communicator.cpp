// The Gloo communicator with ranks as threads of one process (each its own TCP pairs, as separate
// processes would have): all_to_all_v moves uneven and empty slices, the reductions and the gather
// agree on every rank, and a rank that leaves makes the others fail with an error naming the group
// instead of hanging.
#include <gtest/gtest.h>

#include <chrono>

#include "group_threads.h"
#include "core/device_error.h"
#include "runtime/comm/communicator.h"

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

}  // namespace
}  // namespace deepinfer
