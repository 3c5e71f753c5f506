// SWA bounded replay at the model level (docs/kvstore.md): the sliding-window layers' KV rebuilt
// from the last R prefix tokens vs a full recompute. Exact mode (num_swa_layers x window) matches
// it; a bounded replay stays within a KL bound that no replay, or one shorter than the window, exceeds.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "fixtures.h"
#include "model/model.h"
#include "sampling/logprobs.h"

namespace deepinfer {
namespace {

constexpr int32_t kBlock = 4;
constexpr int32_t kTableBlocks = 16;  // 64 positions, gpt_oss's max_position_embeddings
constexpr int32_t kPrefix = 40;       // the prefix hit (a multiple of kBlock)
constexpr int32_t kFollowing = 16;    // tokens scored after it

// A fixture copied to a temp folder, optionally with every layer sliding (the fixtures have one
// sliding layer, where R = window is already exact; two show what a bounded replay loses).
class FixtureCopy {
 public:
  FixtureCopy(const std::string& name, bool all_sliding)
      : dir_(std::filesystem::temp_directory_path() / ("deepinfer_replay_" + name + std::to_string(::getpid()))) {
    std::filesystem::create_directories(dir_);
    for (const auto& entry : std::filesystem::directory_iterator(testing::fixture_dir(name))) {
      std::filesystem::copy_file(entry.path(), dir_ / entry.path().filename(),
                                 std::filesystem::copy_options::overwrite_existing);
    }
    if (all_sliding) {
      std::ifstream in(dir_ / "config.json");
      nlohmann::json config = nlohmann::json::parse(in);
      in.close();
      config["layer_types"] = {"sliding_attention", "sliding_attention"};
      std::ofstream(dir_ / "config.json") << config.dump(2);
    }
  }
  ~FixtureCopy() { std::filesystem::remove_all(dir_); }
  std::string dir() const { return dir_.string(); }

 private:
  std::filesystem::path dir_;
};

std::vector<int32_t> sequence(int32_t count, int32_t seed) {
  std::vector<int32_t> tokens;
  for (int32_t i = 0; i < count; ++i) tokens.push_back((i * 37 + seed * 101 + 11) % 397);
  return tokens;
}

// Table of kTableBlocks consecutive block ids from first.
std::vector<int32_t> table_from(int32_t first) {
  std::vector<int32_t> table(kTableBlocks);
  for (int32_t i = 0; i < kTableBlocks; ++i) table[static_cast<size_t>(i)] = first + i;
  return table;
}

int32_t slot(const std::vector<int32_t>& table, int32_t position) {
  return table[static_cast<size_t>(position / kBlock)] * kBlock + position % kBlock;
}

// Runs tokens at positions [start, start + n) of one sequence and returns every row's logits.
// full_write false: the full-attention layers read their cache but leave it as it is. The
// sliding-window layers use swa_table and see only keys from swa_origin (a multiple of kBlock) on.
std::vector<float> run(CausalLM& model, const std::vector<int32_t>& tokens, int32_t start,
                       const std::vector<int32_t>& full_table, bool full_write, const std::vector<int32_t>& swa_table,
                       int32_t swa_origin) {
  ForwardBatch batch;
  const auto n = static_cast<int32_t>(tokens.size());
  batch.token_ids = tokens;
  for (int32_t i = 0; i < n; ++i) {
    const int32_t position = start + i;
    batch.positions.push_back(position);
    batch.slot_mapping.push_back(full_write ? slot(full_table, position) : -1);
    batch.swa_slot_mapping.push_back(slot(swa_table, position));
    batch.logit_rows.push_back(i);
  }
  batch.query_start = {0, n};
  batch.seq_len = {start + n};
  batch.block_table = full_table;
  batch.max_blocks_per_seq = kTableBlocks;
  batch.swa_block_table.assign(static_cast<size_t>(kTableBlocks), swa_table.back());
  std::copy(swa_table.begin() + swa_origin / kBlock, swa_table.end(), batch.swa_block_table.begin());
  batch.swa_seq_len = {start + n - swa_origin};
  std::vector<float> logits(static_cast<size_t>(n) * static_cast<size_t>(model.config().vocab_size));
  model.forward(batch, logits.data());
  return logits;
}

struct Divergence {
  double mean_kl = 0.0;
  double max_kl = 0.0;
  double max_abs_logit = 0.0;
};

// KL(reference || replayed) of each row's next-token distribution.
Divergence divergence(const std::vector<float>& reference, const std::vector<float>& replayed, int64_t vocab) {
  Divergence d;
  const int64_t rows = static_cast<int64_t>(reference.size()) / vocab;
  for (int64_t r = 0; r < rows; ++r) {
    const double kl = kl_divergence(reference.data() + r * vocab, replayed.data() + r * vocab, vocab);
    d.mean_kl += kl / static_cast<double>(rows);
    d.max_kl = std::max(d.max_kl, kl);
  }
  for (size_t i = 0; i < reference.size(); ++i) {
    d.max_abs_logit = std::max(d.max_abs_logit, static_cast<double>(std::fabs(reference[i] - replayed[i])));
  }
  return d;
}

// Full recompute vs a replay of the prefix's last `replay` tokens into fresh sliding-window pages
// holding another sequence's KV (so reading anything the replay did not write shows).
class Replay {
 public:
  explicit Replay(const std::string& dir)
      : backend_(make_backend("cpu").value()), model_(load_model(dir, *backend_, false).value()) {
    model_->allocate_kv_cache({2 * kTableBlocks, kBlock, 2 * kTableBlocks});
    const std::vector<int32_t> tokens = sequence(kPrefix + kFollowing, 0);
    prefix_.assign(tokens.begin(), tokens.begin() + kPrefix);
    following_.assign(tokens.begin() + kPrefix, tokens.end());
    run(*model_, sequence(kPrefix + kFollowing, 1), 0, table_from(kTableBlocks), true, table_from(kTableBlocks), 0);
    run(*model_, prefix_, 0, table_from(0), true, table_from(0), 0);
    reference_ = run(*model_, following_, kPrefix, table_from(0), true, table_from(0), 0);
  }
  int64_t vocab() const { return model_->config().vocab_size; }
  int32_t window() const {
    int32_t window = 0;
    for (const int64_t w : model_->config().layer_sliding_window) window = std::max(window, static_cast<int32_t>(w));
    return window;
  }
  int32_t num_swa_layers() const {
    return static_cast<int32_t>(std::count_if(model_->config().layer_sliding_window.begin(),
                                              model_->config().layer_sliding_window.end(),
                                              [](int64_t w) { return w > 0; }));
  }

  Divergence replay(int32_t replay_tokens) {
    const int32_t origin = kPrefix - replay_tokens;
    const std::vector<int32_t> fresh = table_from(kTableBlocks);
    if (replay_tokens > 0) {
      const std::vector<int32_t> segment(prefix_.begin() + origin, prefix_.end());
      run(*model_, segment, origin, table_from(0), false, fresh, origin);
    }
    return divergence(reference_, run(*model_, following_, kPrefix, table_from(0), true, fresh, origin), vocab());
  }
  // The full recompute's continuation again: differs from the first only if a replay rewrote the
  // full-attention layers' prefix KV.
  Divergence recompute() {
    return divergence(reference_, run(*model_, following_, kPrefix, table_from(0), true, table_from(0), 0), vocab());
  }

 private:
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<CausalLM> model_;
  std::vector<int32_t> prefix_, following_;
  std::vector<float> reference_;
};

void report(const std::string& name, int32_t replay_tokens, const Divergence& d) {
  std::printf("replay %-22s R=%2d  mean KL %.3e  max KL %.3e  max |dlogit| %.3e\n", name.c_str(), replay_tokens,
              d.mean_kl, d.max_kl, d.max_abs_logit);
}

// Stated bound on a bounded replay's mean KL; skipping the replay must exceed it.
constexpr double kBoundedMeanKl = 4e-3;

void check_fixture(const std::string& name, bool all_sliding) {
  const FixtureCopy copy(name, all_sliding);
  Replay replay(copy.dir());
  const int32_t window = replay.window();
  ASSERT_GT(window, 0);
  ASSERT_EQ(window % kBlock, 0);
  const std::string label = name + (all_sliding ? " (all sliding)" : "");
  const int32_t exact_tokens = std::min(kPrefix, replay.num_swa_layers() * window);
  const Divergence exact = replay.replay(exact_tokens);
  report(label + " exact", exact_tokens, exact);
  EXPECT_LT(exact.max_abs_logit, 1e-5);
  for (const int32_t r : {window, 2 * window}) {
    const Divergence bounded = replay.replay(r);
    report(label, r, bounded);
    EXPECT_LT(bounded.mean_kl, kBoundedMeanKl) << r;
  }
  const Divergence skipped = replay.replay(0);
  report(label + " none", 0, skipped);
  EXPECT_GT(skipped.mean_kl, kBoundedMeanKl);
  if (all_sliding) {
    // Two sliding layers: R = window is short of exact, so the bound above was really tested.
    EXPECT_GT(replay.replay(window).max_abs_logit, 1e-4);
  } else {
    // A replay shorter than the window leaves the full layers' hidden states off, which would
    // show in their prefix KV had the replay rewritten it.
    const Divergence short_replay = replay.replay(window / 2);
    report(label + " short", window / 2, short_replay);
    EXPECT_GT(short_replay.mean_kl, kBoundedMeanKl);
    EXPECT_EQ(replay.recompute().max_abs_logit, 0.0);
  }
}

TEST(SwaReplay, GptOss) { check_fixture("gpt_oss", false); }
TEST(SwaReplay, Gemma3) { check_fixture("gemma3", false); }
TEST(SwaReplay, GptOssAllSliding) { check_fixture("gpt_oss", true); }
TEST(SwaReplay, Gemma3AllSliding) { check_fixture("gemma3", true); }

}  // namespace
}  // namespace deepinfer
