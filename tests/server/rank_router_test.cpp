// The data-parallel front's choice of rank: least outstanding tokens with its tie-breaks, and
// prefix affinity within its slack, with the remembered blocks bounded like a rank's KV pool.
#include "server/rank_router.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace deepinfer::server {
namespace {

std::vector<RankAddress> addresses(int32_t n) { return std::vector<RankAddress>(static_cast<size_t>(n)); }

// A prompt's chain hashes: prompts sharing the first `shared` tokens share those leading blocks.
std::vector<BlockHash> prompt_blocks(const std::vector<int32_t>& tokens) {
  BlockHashChain chain(prefix_root_hash("model", ""), 4);
  chain.extend(tokens);
  std::vector<BlockHash> blocks;
  for (int32_t i = 0; i < chain.num_blocks(); ++i) blocks.push_back(chain.hash(i));
  return blocks;
}

RoutedRequest request(int64_t tokens, std::vector<BlockHash> blocks = {}) {
  RoutedRequest r;
  r.tokens = tokens;
  r.prompt_blocks = std::move(blocks);
  return r;
}

RankRouterOptions affinity(int64_t remembered, int64_t slack) {
  RankRouterOptions options;
  options.routing = RankRouting::kPrefixAffinity;
  options.block_size = 4;
  options.remembered_blocks_per_rank = remembered;
  options.affinity_slack_tokens = slack;
  return options;
}

// An image's placeholders hash as the image (its file here, as a router has it): the same image
// names the same blocks, another image or none other blocks, from the first block holding part of it.
TEST(RoutedRequest, ImagesNameTheirBlocks) {
  const std::vector<int32_t> prompt = {1, 2, 3, 4, 9, 9, 9, 9, 9, 9, 5, 6};  // an image of 6 placeholders
  const auto with_image = [&](std::vector<uint8_t> file) {
    ImageInput image;
    image.first_token = 4;
    image.file = std::move(file);
    return routed_request(prompt, SamplingParams{}, "model", "", 4, {image}).prompt_blocks;
  };
  const std::vector<BlockHash> cat = with_image({1, 2, 3});
  const std::vector<BlockHash> dog = with_image({4, 5, 6});
  const std::vector<BlockHash> text = routed_request(prompt, SamplingParams{}, "model", "", 4).prompt_blocks;
  ASSERT_EQ(cat.size(), 3u);
  EXPECT_EQ(cat, with_image({1, 2, 3}));
  EXPECT_EQ(text, prompt_blocks(prompt));
  EXPECT_EQ(cat[0], text[0]);  // before the image
  EXPECT_EQ(cat[0], dog[0]);
  for (size_t b = 1; b < cat.size(); ++b) {
    EXPECT_NE(cat[b], dog[b]) << b;
    EXPECT_NE(cat[b], text[b]) << b;
  }
  ImageInput image;
  image.first_token = 4;
  const std::vector<ImagePlaceholders> runs = image_placeholders(prompt, {image});
  ASSERT_EQ(runs.size(), 1u);
  EXPECT_EQ(runs[0].num_tokens, 6);
}

TEST(RankRouter, LeastOutstandingTokensThenFewerRequestsThenTakingTurns) {
  RankRouter router(addresses(3));
  EXPECT_EQ(router.acquire(request(100)), 0);
  EXPECT_EQ(router.acquire(request(10)), 1);
  EXPECT_EQ(router.acquire(request(10)), 2);
  EXPECT_EQ(router.acquire(request(5)), 1);  // ranks 1 and 2 hold 10 tokens: rank 1 is lower
  router.release(0, 100);
  EXPECT_EQ(router.acquire(request(1)), 0);  // idle again: the fewest tokens
  router.release(0, 1);
  router.release(1, 10);
  router.release(1, 5);
  router.release(2, 10);
  // All idle: rank 2 has been routed fewer requests than 0 (2) and 1 (2).
  EXPECT_EQ(router.acquire(request(1)), 2);
}

TEST(RankRouter, LeastLoadedIgnoresPrefixes) {
  RankRouter router(addresses(2));
  const auto blocks = prompt_blocks({1, 2, 3, 4, 5, 6, 7, 8});
  EXPECT_EQ(router.acquire(request(8, blocks)), 0);
  router.release(0, 8);
  EXPECT_EQ(router.acquire(request(8, blocks)), 1);  // taking turns, the cache notwithstanding
}

TEST(RankRouter, PrefixAffinitySendsAPromptWhereItsLeadingBlocksWent) {
  RankRouter router(addresses(2), affinity(/*remembered=*/100, /*slack=*/1000));
  const std::vector<int32_t> a = {1, 2, 3, 4, 5, 6, 7, 8};
  const std::vector<int32_t> b = {9, 9, 9, 9, 8, 8, 8, 8};
  EXPECT_EQ(router.acquire(request(8, prompt_blocks(a))), 0);
  EXPECT_EQ(router.acquire(request(8, prompt_blocks(b))), 1);
  router.release(0, 8);
  router.release(1, 8);
  // Load alone picks rank 0 (a tie, the lower rank); b's continuation goes where b's blocks are.
  std::vector<int32_t> b_longer = b;
  b_longer.insert(b_longer.end(), {7, 7, 7, 7});
  EXPECT_EQ(router.acquire(request(12, prompt_blocks(b_longer))), 1);
  // A prompt that shares only a later block with a (the chain hashes differ from the first) has
  // no affinity.
  EXPECT_EQ(router.acquire(request(8, prompt_blocks({0, 2, 3, 4, 5, 6, 7, 8}))), 0);
  std::string metrics;
  router.render_metrics(metrics);
  EXPECT_NE(metrics.find("deepinfer_rank_routed_by_prefix_affinity_total{rank=\"1\"} 1\n"), std::string::npos)
      << metrics;
  EXPECT_NE(metrics.find("deepinfer_rank_routed_by_prefix_affinity_total{rank=\"0\"} 0\n"), std::string::npos);
}

TEST(RankRouter, PrefixAffinityYieldsToLoadBeyondTheSlack) {
  RankRouter router(addresses(2), affinity(100, /*slack=*/50));
  const auto blocks = prompt_blocks({1, 2, 3, 4, 5, 6, 7, 8});
  EXPECT_EQ(router.acquire(request(40, blocks)), 0);
  EXPECT_EQ(router.acquire(request(40, blocks)), 0);  // 40 above the idle rank 1: within the slack
  EXPECT_EQ(router.acquire(request(40, blocks)), 1);  // 80 above it: load wins
  EXPECT_EQ(router.acquire(request(40, blocks)), 1);  // now rank 1 has the blocks too, and less load
}

TEST(RankRouter, PrefixAffinityForgetsAPromptsTailFirst) {
  RankRouter router(addresses(2), affinity(/*remembered=*/3, /*slack=*/0));
  const std::vector<int32_t> a = {1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3};
  const std::vector<int32_t> a_head = {1, 1, 1, 1, 2, 2, 2, 2};
  EXPECT_EQ(router.acquire(request(10, prompt_blocks(a))), 0);
  // Rank 0 is busier than rank 1 by more than the slack (0): a's first two blocks go to rank 1.
  EXPECT_EQ(router.acquire(request(0, prompt_blocks(a_head))), 1);
  router.release(0, 10);
  router.release(1, 0);
  // A new prompt's block on rank 0 (a tie, the lower rank) pushes out a's last block, not its head.
  EXPECT_EQ(router.acquire(request(0, prompt_blocks({7, 7, 7, 7}))), 0);
  router.release(0, 0);
  // Both ranks now match a's first two blocks; had rank 0 kept all three it would win. Rank 1 has
  // been routed fewer requests.
  EXPECT_EQ(router.acquire(request(0, prompt_blocks(a))), 1);
}

TEST(RankRouter, RoutingNamesAreCheckedWithTheFlagInTheMessage) {
  EXPECT_EQ(*parse_rank_routing("least-loaded"), RankRouting::kLeastLoaded);
  EXPECT_EQ(*parse_rank_routing("prefix-affinity"), RankRouting::kPrefixAffinity);
  const auto bad = parse_rank_routing("round-robin");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.error().message.find("--data-parallel-routing"), std::string::npos);
  EXPECT_NE(bad.error().message.find("round-robin"), std::string::npos);
}

}  // namespace
}  // namespace deepinfer::server
