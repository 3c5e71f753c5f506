// KvCacheManager: per-sequence page tables over a BlockPool; prefix lookup and registration
// along the SHA-256 hash chain, copy-on-write forks and sliding-window release.
//
// Sliding window (layers that attend to the last sliding_window keys): the token at position p
// sees keys p-window+1..p, so once num_computed tokens are computed no later token needs a key
// before position num_computed - window + 1. Blocks wholly before num_computed - window are
// released (one position of slack keeps a model whose window also covers key p-window correct).
// commit_computed registers a block's hash before it releases it, and a block is released only
// once it is full and computed, so every released block was registered first: its K/V stay
// valid while it waits on the LRU list, and a later request with the same prefix can still walk
// the chain through it from the root. Such a request takes references only on the hit blocks
// inside its own window (the rest get -1 at once). Released blocks are the oldest on the LRU
// list, so under pressure a sliding-window prefix loses its root first and stops hitting.
//
// Mixed models (num_swa_blocks > 0) keep two layer groups, each with its own pool and tables:
// group 0 (full-attention layers) keeps every block, group 1 (sliding-window layers) releases as
// above. Both register the same chain hashes; a prefix hits as far as group 0 has the chain and
// group 1 has the blocks inside the window of the cut (the cut moves back until it does).
#include "kvcache/kv_cache_manager.h"

#include <algorithm>
#include <unordered_map>

#include "core/check.h"

namespace deepinfer {
namespace {

constexpr int32_t kReleased = -1;
// Blocks are identified by token ids alone today. Multimodal inputs (a hash of the image whose
// placeholder tokens fall in the block) and LoRA adapter ids will go here, so that equal token
// ids computed from different such inputs never share a block.
constexpr std::string_view kNoExtraKeys{};

}  // namespace

struct KvCacheManager::Impl {
  // Layers that share page tables: a pool, and per sequence a table into it. Group 0 holds the
  // full-attention layers (or every layer); group 1, when num_swa_blocks > 0, the sliding-window
  // layers. A group with a window releases the blocks that left it.
  struct Group {
    BlockPool pool;
    int32_t window = 0;
  };
  struct Table {
    std::vector<int32_t> block_ids;
    int32_t num_released_blocks = 0;  // leading blocks released by the sliding window
    int32_t num_absent_blocks = 0;    // leading blocks never computed (allocate_imported)
  };
  struct Sequence {
    std::vector<Table> tables;        // one per group, all of the same length
    int32_t num_tokens = 0;           // tokens the tables cover
    int32_t num_computed_tokens = 0;  // tokens whose K/V are written
    int32_t num_hashed_blocks = 0;    // leading full computed blocks whose chain hash is known
    BlockHash last_hash{};            // hash of block num_hashed_blocks - 1, else the root
  };

  struct PrefixHit {
    int32_t num_blocks = 0;
    std::vector<std::vector<int32_t>> block_ids;  // per group [num_blocks]; -1 where outside the window
    BlockHash last_hash{};
  };

  explicit Impl(const KvCacheConfig& c) : config(c) {
    const bool split = c.num_swa_blocks > 0;
    groups.push_back(Group{BlockPool(c.num_blocks), split ? 0 : c.sliding_window});
    if (split) groups.push_back(Group{BlockPool(c.num_swa_blocks), c.sliding_window});
  }

  Sequence& at(int64_t seq_id) {
    const auto it = seqs.find(seq_id);
    DI_CHECK(it != seqs.end(), "unknown sequence " << seq_id);
    return it->second;
  }

  // Leading blocks no later token of a sequence with num_computed computed tokens attends to
  // in the group's layers.
  int32_t num_releasable_blocks(const Group& group, int32_t num_computed) const {
    if (group.window <= 0 || num_computed <= group.window) return 0;
    return (num_computed - group.window) / config.block_size;
  }

  // The cached blocks of tokens' prefix, walking the chain from the root and stopping at the
  // first miss of group 0; never the block that holds the last token. A windowed group needs
  // only the blocks inside the window of the cut, and the cut moves back until it has them.
  // chain: tokens' hashes so far, extended block by block as far as the walk goes.
  PrefixHit find_prefix(std::span<const int32_t> tokens, BlockHashChain& chain) const {
    PrefixHit hit;
    hit.block_ids.resize(groups.size());
    if (!config.enable_prefix_caching) return hit;
    // The root even with no tokens: the sequence's later blocks chain from it.
    hit.last_hash = chain.root();
    if (tokens.empty()) return hit;
    const int32_t bs = config.block_size;
    const auto max_blocks = static_cast<int32_t>((tokens.size() - 1) / static_cast<size_t>(bs));
    int32_t num_hit = 0;
    for (; num_hit < max_blocks; ++num_hit) {
      if (chain.num_blocks() <= num_hit) chain.extend(tokens.first(static_cast<size_t>(num_hit + 1) * bs));
      if (!groups[0].pool.find_cached(chain.hash(num_hit))) break;
    }
    for (; num_hit > 0; --num_hit) {
      bool complete = true;
      for (size_t g = 1; g < groups.size() && complete; ++g) {
        for (int32_t i = num_releasable_blocks(groups[g], num_hit * bs); i < num_hit && complete; ++i) {
          complete = groups[g].pool.find_cached(chain.hash(i)).has_value();
        }
      }
      if (complete) break;
    }
    hit.num_blocks = num_hit;
    if (num_hit > 0) hit.last_hash = chain.hash(num_hit - 1);
    for (size_t g = 0; g < groups.size(); ++g) {
      const int32_t first_kept = num_releasable_blocks(groups[g], num_hit * bs);
      for (int32_t i = 0; i < num_hit; ++i) {
        hit.block_ids[g].push_back(i < first_kept ? kReleased : *groups[g].pool.find_cached(chain.hash(i)));
      }
    }
    return hit;
  }

  void register_full_blocks(Sequence& seq, std::span<const int32_t> tokens) {
    const int32_t bs = config.block_size;
    const int32_t num_full = seq.num_computed_tokens / bs;
    for (int32_t i = seq.num_hashed_blocks; i < num_full; ++i) {
      seq.last_hash = chain_block_hash(seq.last_hash, tokens.data() + static_cast<ptrdiff_t>(i) * bs, bs, kNoExtraKeys);
      for (size_t g = 0; g < groups.size(); ++g) {
        if (i < seq.tables[g].num_absent_blocks) continue;
        const int32_t block_id = seq.tables[g].block_ids[static_cast<size_t>(i)];
        DI_CHECK(block_id != kReleased, "block " << i << " was released before it was hashed");
        groups[g].pool.register_hash(block_id, seq.last_hash);
      }
    }
    seq.num_hashed_blocks = std::max(seq.num_hashed_blocks, num_full);
  }

  void release_outside_window(Sequence& seq) {
    for (size_t g = 0; g < groups.size(); ++g) {
      Table& table = seq.tables[g];
      const int32_t target = num_releasable_blocks(groups[g], seq.num_computed_tokens);
      for (int32_t i = table.num_released_blocks; i < target; ++i) {
        int32_t& block_id = table.block_ids[static_cast<size_t>(i)];
        groups[g].pool.decref(block_id);
        block_id = kReleased;
      }
      table.num_released_blocks = std::max(table.num_released_blocks, target);
    }
  }

  // Extends a sequence's tables to cover num_tokens tokens; false when the blocks are not there.
  bool grow(Sequence& seq, int32_t num_tokens) {
    const int32_t needed =
        blocks_for_tokens(num_tokens, config.block_size) - static_cast<int32_t>(seq.tables[0].block_ids.size());
    if (needed > 0) {
      if (!can_allocate_everywhere(needed)) return false;
      for (size_t g = 0; g < groups.size(); ++g) {
        const std::vector<int32_t> more = groups[g].pool.allocate(needed);
        seq.tables[g].block_ids.insert(seq.tables[g].block_ids.end(), more.begin(), more.end());
      }
    }
    seq.num_tokens = std::max(seq.num_tokens, num_tokens);
    return true;
  }

  bool can_allocate_everywhere(int32_t count) const {
    return std::all_of(groups.begin(), groups.end(), [&](const Group& g) { return g.pool.can_allocate(count); });
  }

  KvCacheConfig config;
  std::vector<Group> groups;
  std::unordered_map<int64_t, Sequence> seqs;
  PrefixCacheStats stats;
};

KvCacheManager::KvCacheManager(const KvCacheConfig& config) : impl_(std::make_unique<Impl>(config)) {
  DI_CHECK(config.num_blocks >= 0 && config.block_size > 0 && config.sliding_window >= 0 &&
               config.num_swa_blocks >= 0 && (config.num_swa_blocks == 0 || config.sliding_window > 0),
           "num_blocks " << config.num_blocks << ", block_size " << config.block_size << ", sliding_window "
                         << config.sliding_window << ", num_swa_blocks " << config.num_swa_blocks);
}

KvCacheManager::~KvCacheManager() = default;
KvCacheManager::KvCacheManager(KvCacheManager&&) noexcept = default;
KvCacheManager& KvCacheManager::operator=(KvCacheManager&&) noexcept = default;

int32_t KvCacheManager::block_size() const { return impl_->config.block_size; }
int32_t KvCacheManager::num_free_blocks() const { return impl_->groups[0].pool.num_free_blocks(); }
int32_t KvCacheManager::num_blocks() const { return impl_->groups[0].pool.num_blocks(); }

double KvCacheManager::usage() const {
  const int32_t total = num_blocks();
  if (total == 0) return 0.0;
  return static_cast<double>(total - num_free_blocks()) / total;
}

BlockHashChain KvCacheManager::new_hash_chain(std::string_view cache_salt) const {
  return BlockHashChain(prefix_root_hash(impl_->config.model_fingerprint, cache_salt), block_size());
}

int32_t KvCacheManager::num_cached_tokens(std::span<const int32_t> tokens, std::string_view cache_salt) const {
  BlockHashChain hashes = new_hash_chain(cache_salt);
  return num_cached_tokens(tokens, hashes);
}

int32_t KvCacheManager::num_cached_tokens(std::span<const int32_t> tokens, BlockHashChain& hashes) const {
  return impl_->find_prefix(tokens, hashes).num_blocks * block_size();
}

bool KvCacheManager::allocate(int64_t seq_id, std::span<const int32_t> tokens, int32_t num_tokens,
                              std::string_view cache_salt, int32_t* num_cached_tokens) {
  // A sequence that has its tables looks nothing up: its root is not worth hashing every step.
  BlockHashChain hashes =
      impl_->seqs.contains(seq_id) ? BlockHashChain(BlockHash{}, block_size()) : new_hash_chain(cache_salt);
  return allocate(seq_id, tokens, num_tokens, hashes, num_cached_tokens);
}

bool KvCacheManager::allocate(int64_t seq_id, std::span<const int32_t> tokens, int32_t num_tokens,
                              BlockHashChain& hashes, int32_t* num_cached_tokens) {
  DI_CHECK(num_tokens >= 0 && num_cached_tokens != nullptr);
  if (const auto it = impl_->seqs.find(seq_id); it != impl_->seqs.end()) {
    *num_cached_tokens = 0;
    return impl_->grow(it->second, num_tokens);
  }
  return allocate_new(seq_id, tokens, num_tokens, hashes, 0, num_cached_tokens);
}

bool KvCacheManager::allocate_imported(int64_t seq_id, std::span<const int32_t> tokens, int32_t num_tokens,
                                       std::string_view cache_salt, int32_t swa_start, int32_t* num_cached_tokens) {
  BlockHashChain hashes = new_hash_chain(cache_salt);
  return allocate_new(seq_id, tokens, num_tokens, hashes, swa_start, num_cached_tokens);
}

bool KvCacheManager::allocate_new(int64_t seq_id, std::span<const int32_t> tokens, int32_t num_tokens,
                                  BlockHashChain& hashes, int32_t swa_start, int32_t* num_cached_tokens) {
  Impl& s = *impl_;
  const int32_t bs = s.config.block_size;
  DI_CHECK(!s.seqs.contains(seq_id) && swa_start >= 0 && swa_start % bs == 0 && num_cached_tokens != nullptr);
  // Group 0 carries the hash chain from the root, so it must keep every block it hashes.
  DI_CHECK(swa_start == 0 || s.groups[0].window == 0, "allocate_imported needs separate sliding-window tables");
  Impl::PrefixHit hit = s.find_prefix(tokens, hashes);
  const int32_t num_cached = hit.num_blocks * bs;
  // Windowed groups' leading entries that stay empty: none when the hit's own blocks already
  // cover the window of swa_start.
  const int32_t num_absent = num_cached >= swa_start ? 0 : swa_start / bs;
  for (size_t g = 0; g < s.groups.size(); ++g) {
    if (s.groups[g].window <= 0) continue;
    for (int32_t i = 0; i < std::min(num_absent, hit.num_blocks); ++i) {
      hit.block_ids[g][static_cast<size_t>(i)] = kReleased;
    }
  }
  const int32_t covered = std::max(num_tokens, num_cached);
  const int32_t num_fresh = blocks_for_tokens(covered, bs) - hit.num_blocks;
  // Of the fresh blocks, those a windowed group leaves empty.
  const int32_t num_fresh_absent = std::clamp(num_absent - hit.num_blocks, 0, num_fresh);
  for (size_t g = 0; g < s.groups.size(); ++g) {
    // Evictable hit blocks count as free, so reviving them uses up room too.
    int32_t num_revived = 0;
    for (int32_t block_id : hit.block_ids[g]) {
      if (block_id != kReleased && s.groups[g].pool.ref_count(block_id) == 0) ++num_revived;
    }
    const int32_t skipped = s.groups[g].window > 0 ? num_fresh_absent : 0;
    if (!s.groups[g].pool.can_allocate(num_fresh - skipped + num_revived)) return false;
  }

  Impl::Sequence seq;
  for (size_t g = 0; g < s.groups.size(); ++g) {
    Impl::Table table;
    table.block_ids = hit.block_ids[g];
    // Hit blocks are referenced before the fresh ones are taken, so allocate() cannot evict them.
    for (int32_t block_id : table.block_ids) {
      if (block_id != kReleased) s.groups[g].pool.incref(block_id);
    }
    const int32_t skipped = s.groups[g].window > 0 ? num_fresh_absent : 0;
    table.block_ids.insert(table.block_ids.end(), static_cast<size_t>(skipped), kReleased);
    const std::vector<int32_t> fresh = s.groups[g].pool.allocate(num_fresh - skipped);
    table.block_ids.insert(table.block_ids.end(), fresh.begin(), fresh.end());
    table.num_absent_blocks = s.groups[g].window > 0 ? num_absent : 0;
    table.num_released_blocks = std::max(s.num_releasable_blocks(s.groups[g], num_cached), table.num_absent_blocks);
    seq.tables.push_back(std::move(table));
  }
  seq.num_tokens = covered;
  seq.num_computed_tokens = num_cached;
  seq.num_hashed_blocks = hit.num_blocks;
  seq.last_hash = hit.last_hash;
  if (s.config.enable_prefix_caching) {
    s.stats.queried_tokens += static_cast<int64_t>(tokens.size());
    s.stats.hit_tokens += num_cached;
  }
  s.seqs.emplace(seq_id, std::move(seq));
  *num_cached_tokens = num_cached;
  return true;
}

void KvCacheManager::commit_computed(int64_t seq_id, std::span<const int32_t> tokens, int32_t num_computed) {
  Impl& s = *impl_;
  Impl::Sequence& seq = s.at(seq_id);
  DI_CHECK(num_computed >= seq.num_computed_tokens && num_computed <= seq.num_tokens &&
               static_cast<size_t>(num_computed) <= tokens.size(),
           "sequence " << seq_id << ": num_computed " << num_computed << " after " << seq.num_computed_tokens
                       << ", table covers " << seq.num_tokens << ", " << tokens.size() << " tokens");
  seq.num_computed_tokens = num_computed;
  // Register before releasing: a block leaving the window is still a valid cached prefix block.
  if (s.config.enable_prefix_caching) s.register_full_blocks(seq, tokens);
  s.release_outside_window(seq);
}

bool KvCacheManager::fork(int64_t parent_seq_id, int64_t child_seq_id,
                          std::vector<std::pair<int32_t, int32_t>>* copies,
                          std::vector<std::pair<int32_t, int32_t>>* swa_copies) {
  Impl& s = *impl_;
  DI_CHECK(copies != nullptr && (s.groups.size() == 1 || swa_copies != nullptr));
  DI_CHECK(!s.seqs.contains(child_seq_id), "fork into existing sequence " << child_seq_id);
  const Impl::Sequence& parent = s.at(parent_seq_id);
  const int32_t bs = s.config.block_size;
  // Only computed tokens are shared; blocks the parent holds beyond them carry no data yet.
  const int32_t num_full = parent.num_computed_tokens / bs;
  const bool has_partial = parent.num_computed_tokens % bs != 0;
  if (has_partial && !s.can_allocate_everywhere(1)) return false;

  Impl::Sequence child;
  for (size_t g = 0; g < s.groups.size(); ++g) {
    const Impl::Table& from = parent.tables[g];
    Impl::Table table;
    table.block_ids.assign(from.block_ids.begin(), from.block_ids.begin() + num_full);
    for (int32_t block_id : table.block_ids) {
      if (block_id != kReleased) s.groups[g].pool.incref(block_id);
    }
    if (has_partial) {
      // Both sequences write their next tokens into this block, so each needs its own copy.
      const int32_t src = from.block_ids[static_cast<size_t>(num_full)];
      DI_CHECK(src != kReleased, "the partial block of sequence " << parent_seq_id << " was released");
      const int32_t dst = s.groups[g].pool.allocate(1).front();
      table.block_ids.push_back(dst);
      (g == 0 ? copies : swa_copies)->emplace_back(src, dst);
    }
    table.num_released_blocks = from.num_released_blocks;
    child.tables.push_back(std::move(table));
  }
  child.num_tokens = parent.num_computed_tokens;
  child.num_computed_tokens = parent.num_computed_tokens;
  child.num_hashed_blocks = parent.num_hashed_blocks;
  child.last_hash = parent.last_hash;
  s.seqs.emplace(child_seq_id, std::move(child));
  return true;
}

void KvCacheManager::free(int64_t seq_id) {
  Impl& s = *impl_;
  const auto it = s.seqs.find(seq_id);
  if (it == s.seqs.end()) return;
  for (size_t g = 0; g < s.groups.size(); ++g) {
    const std::vector<int32_t>& table = it->second.tables[g].block_ids;
    // Last block first: it reaches the LRU list earliest and is evicted before its ancestors,
    // which more prefixes share and without which the chain's later blocks cannot be found.
    for (auto block = table.rbegin(); block != table.rend(); ++block) {
      if (*block != kReleased) s.groups[g].pool.decref(*block);
    }
  }
  s.seqs.erase(it);
}

bool KvCacheManager::has(int64_t seq_id) const { return impl_->seqs.contains(seq_id); }

const std::vector<int32_t>& KvCacheManager::block_table(int64_t seq_id) const {
  return impl_->at(seq_id).tables[0].block_ids;
}

const std::vector<int32_t>& KvCacheManager::swa_block_table(int64_t seq_id) const {
  static const std::vector<int32_t> kNone;
  const Impl::Sequence& seq = impl_->at(seq_id);
  return seq.tables.size() > 1 ? seq.tables[1].block_ids : kNone;
}

bool KvCacheManager::has_swa_tables() const { return impl_->groups.size() > 1; }

int32_t KvCacheManager::num_swa_blocks() const {
  return has_swa_tables() ? impl_->groups[1].pool.num_blocks() : 0;
}

int32_t KvCacheManager::num_used_swa_blocks() const {
  if (!has_swa_tables()) return 0;
  const BlockPool& pool = impl_->groups[1].pool;
  return pool.num_blocks() - pool.num_free_blocks();
}

const PrefixCacheStats& KvCacheManager::stats() const { return impl_->stats; }

void KvCacheManager::check_invariants() const {
  const Impl& s = *impl_;
  const int32_t bs = s.config.block_size;
  for (size_t g = 0; g < s.groups.size(); ++g) {
    const BlockPool& pool = s.groups[g].pool;
    pool.check_invariants();
    std::vector<int32_t> refs(static_cast<size_t>(pool.num_blocks()), 0);
    for (const auto& [seq_id, seq] : s.seqs) {
      const Impl::Table& table = seq.tables[g];
      DI_CHECK(static_cast<int32_t>(table.block_ids.size()) == blocks_for_tokens(seq.num_tokens, bs),
               "sequence " << seq_id << " has " << table.block_ids.size() << " blocks for " << seq.num_tokens
                           << " tokens in group " << g);
      DI_CHECK(seq.num_computed_tokens <= seq.num_tokens);
      DI_CHECK(seq.num_hashed_blocks == (s.config.enable_prefix_caching ? seq.num_computed_tokens / bs : 0),
               "sequence " << seq_id << " hashed " << seq.num_hashed_blocks << " blocks of "
                           << seq.num_computed_tokens << " computed tokens");
      DI_CHECK(table.num_released_blocks ==
               std::max(s.num_releasable_blocks(s.groups[g], seq.num_computed_tokens), table.num_absent_blocks));
      for (size_t i = 0; i < table.block_ids.size(); ++i) {
        const int32_t block_id = table.block_ids[i];
        DI_CHECK((block_id == kReleased) == (static_cast<int32_t>(i) < table.num_released_blocks),
                 "sequence " << seq_id << " entry " << i << " of group " << g << " is " << block_id);
        if (block_id != kReleased) ++refs[static_cast<size_t>(block_id)];
      }
    }
    for (int32_t id = 0; id < pool.num_blocks(); ++id) {
      DI_CHECK(pool.ref_count(id) == refs[static_cast<size_t>(id)],
               "block " << id << " of group " << g << " has ref_count " << pool.ref_count(id) << " but "
                        << refs[static_cast<size_t>(id)] << " table entries");
    }
  }
}

}  // namespace deepinfer
