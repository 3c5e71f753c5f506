// EPLB on demand (CausalLM::request_expert_rebalance) in the default model, two ranks as threads
// over Gloo: a request on one rank only re-places the experts of both at the next round (the flag
// travels in the vote), and the requesting rank's logits before and after are the one-device
// logits bit for bit (batch-invariant backend). Oracle: the same model on one device.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>

#include "group_threads.h"

#include "model/expert_parallel.h"
#include "model/model.h"
#include "parallel/expert_placement.h"

namespace deepinfer {
namespace {

const std::string kModelDir = std::string(DEEPINFER_SOURCE_DIR) + "/models/default";
constexpr int32_t kBlockSize = 16;
constexpr int32_t kNumBlocks = 2;

BackendOptions invariant() {
  BackendOptions options;
  options.batch_invariant = true;
  return options;
}

// One sequence's prompt chunk, then one more token: the logits of each forward, concatenated.
std::vector<float> two_forwards(CausalLM& model, const std::vector<int32_t>& prompt, int32_t next) {
  model.allocate_kv_cache({kNumBlocks, kBlockSize, 0});
  const int64_t vocab = model.config().vocab_size;
  std::vector<float> logits(static_cast<size_t>(prompt.size() + 1) * vocab);
  model.forward(contiguous_sequence_batch(prompt, 0, kNumBlocks), logits.data());
  model.forward(contiguous_sequence_batch({next}, static_cast<int32_t>(prompt.size()), kNumBlocks),
                logits.data() + prompt.size() * vocab);
  return logits;
}

TEST(ExpertRebalance, ARequestOnOneRankReplacesEveryRankAtTheNextRound) {
  const std::vector<int32_t> prompt = {1, 5, 9, 22, 7, 3, 100, 42};
  const int32_t next = 17;
  auto one_backend = make_backend("cpu", invariant()).value();
  auto one_model = load_model(kModelDir, *one_backend, false);
  ASSERT_TRUE(one_model.ok()) << one_model.error().message;
  const std::vector<float> want = two_forwards(**one_model, prompt, next);

  const auto dir = std::filesystem::temp_directory_path() / ("deepinfer-rebalance-" + std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  const std::string placement_file = (dir / "placement.json").string();
  std::vector<float> got;
  bool requested_on_idle_rank = true;
  testing::run_group(2, "rebalance", std::chrono::seconds(60), [&](std::shared_ptr<Communicator> group) {
    const int32_t rank = group->rank();
    auto expert_parallel = std::make_shared<ExpertParallelism>();
    expert_parallel->group = std::move(group);
    expert_parallel->num_redundant_experts = 2;
    expert_parallel->eplb_interval_steps = 0;  // on request only
    expert_parallel->placement_out_file = placement_file;
    auto backend = make_backend("cpu", invariant()).value();
    auto model = load_model(kModelDir, *backend, false, expert_parallel);
    ASSERT_TRUE(model.ok()) << model.error().message;
    if (rank == 0) {
      // Rank 0 runs both forwards; rank 1 asks for the re-placement after joining the first,
      // so it happens at the start of the second.
      got = two_forwards(**model, prompt, next);
      while ((*model)->run_idle_step()) {
      }
    } else {
      EXPECT_TRUE((*model)->run_idle_step());
      requested_on_idle_rank = (*model)->request_expert_rebalance();
      while ((*model)->run_idle_step()) {
      }
    }
  });
  EXPECT_TRUE(requested_on_idle_rank);
  EXPECT_EQ(got, want) << "rank 0's logits before and after the re-placement";
  // The placement rank 0 wrote after the re-placement: fitted to the first forward's routing, so
  // no longer the contiguous start (8 tokens, top-2 of 8 experts: a skewed load).
  auto placements = load_placements(placement_file);
  ASSERT_TRUE(placements.ok()) << placements.error().message;
  ASSERT_EQ(placements->size(), 3u);
  const ExpertPlacement contiguous = ExpertPlacement::contiguous(8, 2, 2).value();
  EXPECT_TRUE((*placements)[0] != contiguous || (*placements)[1] != contiguous);
  std::filesystem::remove_all(dir);

  auto plain = make_backend("cpu").value();
  auto alone = load_model(kModelDir, *plain, false);
  ASSERT_TRUE(alone.ok());
  EXPECT_FALSE((*alone)->request_expert_rebalance()) << "a model outside a group has nothing to re-place";
}

}  // namespace
}  // namespace deepinfer
