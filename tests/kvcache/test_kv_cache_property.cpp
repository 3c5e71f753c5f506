// Randomized property test of KvCacheManager: sequences with shared prefixes grow in random
// chunks, fork, are preempted and freed in tiny pools. Two oracles run beside it: a shadow of
// the device pages (which token at which position each slot holds) and a model of the prefix
// index keyed by the token prefix itself (no hashing), told of every eviction by watching which
// blocks allocate() hands out.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>
#include <string>
#include <unordered_map>
#include <vector>

#include "kvcache/kv_cache_manager.h"

namespace deepinfer {
namespace {

struct PropertyConfig {
  int32_t block_size;
  int32_t num_blocks;
  int32_t sliding_window;
  bool prefix_caching;
  uint32_t seed;
};

const char* const kSalts[] = {"", "tenant-a"};
constexpr int32_t kVocab = 6;  // small, so equal blocks at other offsets are common
constexpr int32_t kMaxLiveSeqs = 6;
constexpr size_t kMaxSeqTokens = 72;
constexpr int32_t kReleased = -1;

class Harness {
 public:
  explicit Harness(const PropertyConfig& c) : c_(c), kv_(make_config(c)), rng_(c.seed) {
    shadow_.resize(static_cast<size_t>(c.num_blocks * c.block_size));
    for (int b = 0; b < 4; ++b) {
      std::vector<int32_t> base(40);
      for (int32_t& t : base) t = uniform(0, kVocab - 1);
      bases_.push_back(base);
    }
  }

  void run(int num_ops) {
    for (int op = 0; op < num_ops; ++op) {
      const int choice = uniform(0, 99);
      if (choice < 25 && static_cast<int32_t>(seqs_.size()) < kMaxLiveSeqs) {
        add_sequence();
      } else if (choice < 75 && !seqs_.empty()) {
        step(pick_live());
      } else if (choice < 87 && !seqs_.empty() && static_cast<int32_t>(seqs_.size()) < kMaxLiveSeqs) {
        fork(pick_live());
      } else if (!seqs_.empty()) {
        const int64_t id = pick_live();
        kv_.free(id);
        seqs_.erase(id);
      }
      kv_.check_invariants();
      if (::testing::Test::HasFailure()) return;
    }
    for (const auto& entry : seqs_) kv_.free(entry.first);
    seqs_.clear();
    kv_.check_invariants();
    EXPECT_EQ(kv_.num_free_blocks(), c_.num_blocks) << "blocks leaked";
    EXPECT_EQ(kv_.usage(), 0.0);
    EXPECT_EQ(kv_.stats().queried_tokens, expected_stats_.queried_tokens);
    EXPECT_EQ(kv_.stats().hit_tokens, expected_stats_.hit_tokens);
  }

  int num_failed_allocations = 0;
  int num_copying_forks = 0;
  int64_t num_hit_tokens = 0;

 private:
  struct Seq {
    std::vector<int32_t> tokens;
    int32_t num_computed = 0;
    int salt = 0;
  };
  struct Slot {
    int32_t token = -1;
    int32_t position = -1;
    int salt = -1;
  };
  using PrefixKey = std::pair<int, std::vector<int32_t>>;

  static KvCacheConfig make_config(const PropertyConfig& c) {
    KvCacheConfig config;
    config.num_blocks = c.num_blocks;
    config.block_size = c.block_size;
    config.enable_prefix_caching = c.prefix_caching;
    config.model_fingerprint = "property";
    config.sliding_window = c.sliding_window;
    return config;
  }

  int32_t uniform(int32_t lo, int32_t hi) { return std::uniform_int_distribution<int32_t>(lo, hi)(rng_); }
  int64_t pick_live() {
    auto it = seqs_.begin();
    std::advance(it, uniform(0, static_cast<int32_t>(seqs_.size()) - 1));
    return it->first;
  }
  Slot& slot(int32_t block_id, int32_t offset) {
    return shadow_[static_cast<size_t>(block_id * c_.block_size + offset)];
  }
  int32_t num_releasable(int32_t num_computed) const {
    if (c_.sliding_window <= 0 || num_computed <= c_.sliding_window) return 0;
    return (num_computed - c_.sliding_window) / c_.block_size;
  }

  // A block allocate() or fork() handed out fresh was free or evicted: it leaves the model index.
  void forget(int32_t block_id) {
    const auto it = key_of_block_.find(block_id);
    if (it == key_of_block_.end()) return;
    index_.erase(it->second);
    key_of_block_.erase(it);
  }

  // Cached blocks of tokens' prefix per the model: whole blocks from the first token, never the last.
  std::vector<int32_t> model_hit(const std::vector<int32_t>& tokens, int salt) const {
    std::vector<int32_t> hit;
    if (!c_.prefix_caching || tokens.empty()) return hit;
    const size_t bs = static_cast<size_t>(c_.block_size);
    for (size_t i = 0; i < (tokens.size() - 1) / bs; ++i) {
      const auto it = index_.find({salt, std::vector<int32_t>(tokens.begin(), tokens.begin() + (i + 1) * bs)});
      if (it == index_.end()) break;
      hit.push_back(it->second);
    }
    return hit;
  }

  void add_sequence() {
    Seq seq;
    seq.salt = uniform(0, 3) == 0 ? 1 : 0;
    if (!waiting_.empty() && uniform(0, 1) == 0) {
      seq = waiting_.back();  // a preempted sequence comes back and recomputes
      waiting_.pop_back();
      seq.num_computed = 0;
    } else {
      const std::vector<int32_t>& base = bases_[static_cast<size_t>(uniform(0, 3))];
      seq.tokens.assign(base.begin(), base.begin() + uniform(0, 40));
      for (int32_t n = uniform(1, 16); n > 0; --n) seq.tokens.push_back(uniform(0, kVocab - 1));
    }
    const int64_t id = next_id_++;
    const std::vector<int32_t> expected_hit = model_hit(seq.tokens, seq.salt);
    const auto expected_cached = static_cast<int32_t>(expected_hit.size()) * c_.block_size;
    ASSERT_EQ(kv_.num_cached_tokens(seq.tokens, kSalts[seq.salt]), expected_cached);
    const int32_t num_tokens = std::min(static_cast<int32_t>(seq.tokens.size()), uniform(1, 12));
    const int32_t free_before = kv_.num_free_blocks();
    const PrefixCacheStats stats_before = kv_.stats();
    int32_t cached = -1;
    if (!kv_.allocate(id, seq.tokens, num_tokens, kSalts[seq.salt], &cached)) {
      ++num_failed_allocations;
      ASSERT_FALSE(kv_.has(id));
      ASSERT_EQ(kv_.num_free_blocks(), free_before);
      ASSERT_EQ(kv_.stats().hit_tokens, stats_before.hit_tokens);
      ASSERT_EQ(kv_.stats().queried_tokens, stats_before.queried_tokens);
      return;
    }
    ASSERT_EQ(cached, expected_cached);
    if (c_.prefix_caching) {
      expected_stats_.queried_tokens += static_cast<int64_t>(seq.tokens.size());
      expected_stats_.hit_tokens += cached;
    }
    num_hit_tokens += cached;
    const std::vector<int32_t> table = kv_.block_table(id);
    const int32_t skipped = num_releasable(cached);
    for (size_t i = 0; i < table.size(); ++i) {
      if (i < expected_hit.size()) {
        ASSERT_EQ(table[i], static_cast<int32_t>(i) < skipped ? kReleased : expected_hit[i]) << "entry " << i;
      } else {
        forget(table[i]);
      }
    }
    seq.num_computed = cached;
    seqs_[id] = seq;
    verify(id);
    compute(id, std::max(num_tokens, cached));
  }

  void step(int64_t id) {
    Seq& seq = seqs_.at(id);
    if (seq.num_computed == static_cast<int32_t>(seq.tokens.size())) {
      if (seq.tokens.size() >= kMaxSeqTokens) {
        kv_.free(id);
        seqs_.erase(id);
        return;
      }
      seq.tokens.push_back(uniform(0, kVocab - 1));  // the token the last step sampled
    }
    const int32_t target = std::min(static_cast<int32_t>(seq.tokens.size()), seq.num_computed + uniform(1, 12));
    const std::vector<int32_t> before = kv_.block_table(id);
    int32_t cached = -1;
    if (!kv_.allocate(id, seq.tokens, target, kSalts[seq.salt], &cached)) {
      ++num_failed_allocations;
      ASSERT_EQ(kv_.block_table(id), before);
      // Preemption by recompute: the sequence gives everything back and waits.
      waiting_.push_back(seq);
      kv_.free(id);
      seqs_.erase(id);
      return;
    }
    ASSERT_EQ(cached, 0);
    const std::vector<int32_t>& after = kv_.block_table(id);
    ASSERT_TRUE(std::equal(before.begin(), before.end(), after.begin()));
    for (size_t i = before.size(); i < after.size(); ++i) forget(after[i]);
    compute(id, target);
  }

  // Writes K/V for tokens [num_computed, target) into the shadow, then commits them.
  void compute(int64_t id, int32_t target) {
    Seq& seq = seqs_.at(id);
    const std::vector<int32_t> table = kv_.block_table(id);
    for (int32_t p = seq.num_computed; p < target; ++p) {
      const int32_t block_id = table[static_cast<size_t>(p / c_.block_size)];
      ASSERT_NE(block_id, kReleased);
      // Copy-on-write: a block being written belongs to this sequence alone and is not cached.
      ASSERT_FALSE(key_of_block_.contains(block_id)) << "writing into cached block " << block_id;
      for (const auto& [other_id, other] : seqs_) {
        if (other_id == id) continue;
        const std::vector<int32_t>& other_table = kv_.block_table(other_id);
        ASSERT_EQ(std::count(other_table.begin(), other_table.end(), block_id), 0)
            << "sequences " << id << " and " << other_id << " share block " << block_id << " being written";
      }
      slot(block_id, p % c_.block_size) = Slot{seq.tokens[static_cast<size_t>(p)], p, seq.salt};
    }
    const int32_t first_new_block = seq.num_computed / c_.block_size;
    kv_.commit_computed(id, seq.tokens, target);
    seq.num_computed = target;
    if (c_.prefix_caching) {
      for (int32_t i = first_new_block; i < target / c_.block_size; ++i) {
        PrefixKey key{seq.salt, std::vector<int32_t>(seq.tokens.begin(), seq.tokens.begin() + (i + 1) * c_.block_size)};
        const int32_t block_id = table[static_cast<size_t>(i)];
        if (index_.contains(key)) continue;  // the first copy stays canonical
        key_of_block_[block_id] = key;
        index_.emplace(std::move(key), block_id);
      }
    }
    verify(id);
  }

  void fork(int64_t parent_id) {
    const Seq& parent = seqs_.at(parent_id);
    const int64_t child_id = next_id_++;
    std::vector<std::pair<int32_t, int32_t>> copies;
    if (!kv_.fork(parent_id, child_id, &copies)) {
      ++num_failed_allocations;
      ASSERT_NE(parent.num_computed % c_.block_size, 0);
      ASSERT_EQ(kv_.num_free_blocks(), 0);
      ASSERT_FALSE(kv_.has(child_id));
      return;
    }
    ASSERT_EQ(copies.size(), parent.num_computed % c_.block_size != 0 ? 1u : 0u);
    for (const auto& [src, dst] : copies) {
      forget(dst);
      for (int32_t offset = 0; offset < c_.block_size; ++offset) slot(dst, offset) = slot(src, offset);
      ++num_copying_forks;
    }
    Seq child = parent;
    child.tokens.resize(static_cast<size_t>(parent.num_computed));
    seqs_[child_id] = child;
    verify(child_id);
  }

  // Every computed position still in the table holds this sequence's token; only positions
  // wholly behind the sliding window may be released.
  void verify(int64_t id) {
    const Seq& seq = seqs_.at(id);
    const std::vector<int32_t>& table = kv_.block_table(id);
    for (int32_t p = 0; p < seq.num_computed; ++p) {
      const int32_t block_id = table[static_cast<size_t>(p / c_.block_size)];
      if (block_id == kReleased) {
        ASSERT_LE((p / c_.block_size + 1) * c_.block_size, seq.num_computed - c_.sliding_window)
            << "sequence " << id << " released position " << p << " its window still needs";
        continue;
      }
      const Slot& s = slot(block_id, p % c_.block_size);
      ASSERT_EQ(s.token, seq.tokens[static_cast<size_t>(p)]) << "sequence " << id << " position " << p;
      ASSERT_EQ(s.position, p) << "sequence " << id << " block " << block_id;
      ASSERT_EQ(s.salt, seq.salt) << "sequence " << id << " reads another tenant's block " << block_id;
    }
  }

  PropertyConfig c_;
  KvCacheManager kv_;
  std::mt19937 rng_;
  std::vector<std::vector<int32_t>> bases_;
  std::vector<Slot> shadow_;
  std::map<int64_t, Seq> seqs_;
  std::vector<Seq> waiting_;
  std::map<PrefixKey, int32_t> index_;
  std::unordered_map<int32_t, PrefixKey> key_of_block_;
  PrefixCacheStats expected_stats_;
  int64_t next_id_ = 0;
};

class KvCacheProperty : public ::testing::TestWithParam<PropertyConfig> {};

TEST_P(KvCacheProperty, RandomWorkloadKeepsInvariants) {
  Harness harness(GetParam());
  harness.run(20000);
  // The workload must reach the paths it is meant to test.
  EXPECT_GT(harness.num_failed_allocations, 0);
  EXPECT_GT(harness.num_copying_forks, 0);
  if (GetParam().prefix_caching) {
    EXPECT_GT(harness.num_hit_tokens, 0);
  }
}

INSTANTIATE_TEST_SUITE_P(Configs, KvCacheProperty,
                         ::testing::Values(PropertyConfig{4, 16, 0, true, 1}, PropertyConfig{4, 12, 0, true, 2},
                                           PropertyConfig{2, 20, 0, true, 3}, PropertyConfig{8, 10, 0, true, 4},
                                           PropertyConfig{4, 9, 7, true, 5}, PropertyConfig{4, 10, 9, true, 6},
                                           PropertyConfig{3, 16, 0, false, 7}, PropertyConfig{4, 7, 5, false, 8}),
                         [](const ::testing::TestParamInfo<PropertyConfig>& info) {
                           const PropertyConfig& c = info.param;
                           return "bs" + std::to_string(c.block_size) + "_blocks" + std::to_string(c.num_blocks) +
                                  "_window" + std::to_string(c.sliding_window) +
                                  (c.prefix_caching ? "_cached" : "_uncached");
                         });

}  // namespace
}  // namespace deepinfer
