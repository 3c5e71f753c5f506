// KvCacheManager: per-sequence page tables over a BlockPool; prefix lookup and registration
// along the SHA-256 hash chain, copy-on-write forks and sliding-window release.
//
// Sliding window (every layer attends to the last sliding_window keys): the token at position p
// sees keys p-window+1..p, so once num_computed tokens are computed no later token needs a key
// before position num_computed - window + 1. Blocks wholly before num_computed - window are
// released (one position of slack keeps a model whose window also covers key p-window correct).
// commit_computed registers a block's hash before it releases it, and a block is released only
// once it is full and computed, so every released block was registered first: its K/V stay
// valid while it waits on the LRU list, and a later request with the same prefix can still walk
// the chain through it from the root. Such a request takes references only on the hit blocks
// inside its own window (the rest get -1 at once). Released blocks are the oldest on the LRU
// list, so under pressure a sliding-window prefix loses its root first and stops hitting.
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
  struct Sequence {
    std::vector<int32_t> block_table;
    int32_t num_tokens = 0;           // tokens the table covers
    int32_t num_computed_tokens = 0;  // tokens whose K/V are written
    int32_t num_hashed_blocks = 0;    // leading full computed blocks whose chain hash is known
    BlockHash last_hash{};            // hash of block num_hashed_blocks - 1, else the root
    int32_t num_released_blocks = 0;  // leading blocks released by the sliding window
  };

  struct PrefixHit {
    std::vector<int32_t> block_ids;
    BlockHash last_hash{};
  };

  explicit Impl(const KvCacheConfig& c) : config(c), pool(c.num_blocks) {}

  Sequence& at(int64_t seq_id) {
    const auto it = seqs.find(seq_id);
    DI_CHECK(it != seqs.end(), "unknown sequence " << seq_id);
    return it->second;
  }

  // The cached blocks of tokens' prefix, walking the chain from the root and stopping at the
  // first miss; never the block that holds the last token.
  PrefixHit find_prefix(const std::vector<int32_t>& tokens, std::string_view cache_salt) const {
    PrefixHit hit;
    if (!config.enable_prefix_caching) return hit;
    // The root even with no tokens: the sequence's later blocks chain from it.
    hit.last_hash = prefix_root_hash(config.model_fingerprint, cache_salt);
    if (tokens.empty()) return hit;
    const int32_t bs = config.block_size;
    const auto max_blocks = static_cast<int32_t>((tokens.size() - 1) / static_cast<size_t>(bs));
    for (int32_t i = 0; i < max_blocks; ++i) {
      const BlockHash hash = chain_block_hash(hit.last_hash, tokens.data() + static_cast<ptrdiff_t>(i) * bs, bs, kNoExtraKeys);
      const std::optional<int32_t> block_id = pool.find_cached(hash);
      if (!block_id) break;
      hit.block_ids.push_back(*block_id);
      hit.last_hash = hash;
    }
    return hit;
  }

  // Leading blocks no later token of a sequence with num_computed computed tokens attends to.
  int32_t num_releasable_blocks(int32_t num_computed) const {
    if (config.sliding_window <= 0 || num_computed <= config.sliding_window) return 0;
    return (num_computed - config.sliding_window) / config.block_size;
  }

  void register_full_blocks(Sequence& seq, const std::vector<int32_t>& tokens) {
    const int32_t bs = config.block_size;
    const int32_t num_full = seq.num_computed_tokens / bs;
    for (int32_t i = seq.num_hashed_blocks; i < num_full; ++i) {
      seq.last_hash = chain_block_hash(seq.last_hash, tokens.data() + static_cast<ptrdiff_t>(i) * bs, bs, kNoExtraKeys);
      const int32_t block_id = seq.block_table[static_cast<size_t>(i)];
      DI_CHECK(block_id != kReleased, "block " << i << " was released before it was hashed");
      pool.register_hash(block_id, seq.last_hash);
    }
    seq.num_hashed_blocks = std::max(seq.num_hashed_blocks, num_full);
  }

  void release_outside_window(Sequence& seq) {
    const int32_t target = num_releasable_blocks(seq.num_computed_tokens);
    for (int32_t i = seq.num_released_blocks; i < target; ++i) {
      int32_t& block_id = seq.block_table[static_cast<size_t>(i)];
      pool.decref(block_id);
      block_id = kReleased;
    }
    seq.num_released_blocks = std::max(seq.num_released_blocks, target);
  }

  KvCacheConfig config;
  BlockPool pool;
  std::unordered_map<int64_t, Sequence> seqs;
  PrefixCacheStats stats;
};

KvCacheManager::KvCacheManager(const KvCacheConfig& config) : impl_(std::make_unique<Impl>(config)) {
  DI_CHECK(config.num_blocks >= 0 && config.block_size > 0 && config.sliding_window >= 0,
           "num_blocks " << config.num_blocks << ", block_size " << config.block_size << ", sliding_window "
                         << config.sliding_window);
}

KvCacheManager::~KvCacheManager() = default;
KvCacheManager::KvCacheManager(KvCacheManager&&) noexcept = default;
KvCacheManager& KvCacheManager::operator=(KvCacheManager&&) noexcept = default;

int32_t KvCacheManager::block_size() const { return impl_->config.block_size; }
int32_t KvCacheManager::num_free_blocks() const { return impl_->pool.num_free_blocks(); }
int32_t KvCacheManager::num_blocks() const { return impl_->pool.num_blocks(); }

double KvCacheManager::usage() const {
  const int32_t total = num_blocks();
  if (total == 0) return 0.0;
  return static_cast<double>(total - num_free_blocks()) / total;
}

int32_t KvCacheManager::num_cached_tokens(const std::vector<int32_t>& tokens, std::string_view cache_salt) const {
  return static_cast<int32_t>(impl_->find_prefix(tokens, cache_salt).block_ids.size()) * block_size();
}

bool KvCacheManager::allocate(int64_t seq_id, const std::vector<int32_t>& tokens, int32_t num_tokens,
                              std::string_view cache_salt, int32_t* num_cached_tokens) {
  DI_CHECK(num_tokens >= 0 && num_cached_tokens != nullptr);
  Impl& s = *impl_;
  const int32_t bs = s.config.block_size;
  if (const auto it = s.seqs.find(seq_id); it != s.seqs.end()) {
    Impl::Sequence& seq = it->second;
    const int32_t needed = blocks_for_tokens(num_tokens, bs) - static_cast<int32_t>(seq.block_table.size());
    if (needed > 0) {
      if (!s.pool.can_allocate(needed)) return false;
      const std::vector<int32_t> more = s.pool.allocate(needed);
      seq.block_table.insert(seq.block_table.end(), more.begin(), more.end());
    }
    seq.num_tokens = std::max(seq.num_tokens, num_tokens);
    *num_cached_tokens = 0;
    return true;
  }

  Impl::PrefixHit hit = s.find_prefix(tokens, cache_salt);
  const auto num_hit_blocks = static_cast<int32_t>(hit.block_ids.size());
  const int32_t num_cached = num_hit_blocks * bs;
  const int32_t covered = std::max(num_tokens, num_cached);
  const int32_t num_skipped = s.num_releasable_blocks(num_cached);
  // Evictable hit blocks count as free, so reviving them uses up room too.
  int32_t num_revived = 0;
  for (int32_t i = num_skipped; i < num_hit_blocks; ++i) {
    if (s.pool.ref_count(hit.block_ids[static_cast<size_t>(i)]) == 0) ++num_revived;
  }
  const int32_t num_fresh = blocks_for_tokens(covered, bs) - num_hit_blocks;
  if (!s.pool.can_allocate(num_fresh + num_revived)) return false;

  Impl::Sequence seq;
  seq.block_table.reserve(static_cast<size_t>(num_hit_blocks + num_fresh));
  for (int32_t i = 0; i < num_hit_blocks; ++i) {
    const int32_t block_id = hit.block_ids[static_cast<size_t>(i)];
    // Hit blocks are referenced before the fresh ones are taken, so allocate() cannot evict them.
    if (i >= num_skipped) s.pool.incref(block_id);
    seq.block_table.push_back(i < num_skipped ? kReleased : block_id);
  }
  const std::vector<int32_t> fresh = s.pool.allocate(num_fresh);
  seq.block_table.insert(seq.block_table.end(), fresh.begin(), fresh.end());
  seq.num_tokens = covered;
  seq.num_computed_tokens = num_cached;
  seq.num_hashed_blocks = num_hit_blocks;
  seq.last_hash = hit.last_hash;
  seq.num_released_blocks = num_skipped;
  if (s.config.enable_prefix_caching) {
    s.stats.queried_tokens += static_cast<int64_t>(tokens.size());
    s.stats.hit_tokens += num_cached;
  }
  s.seqs.emplace(seq_id, std::move(seq));
  *num_cached_tokens = num_cached;
  return true;
}

void KvCacheManager::commit_computed(int64_t seq_id, const std::vector<int32_t>& tokens, int32_t num_computed) {
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
                          std::vector<std::pair<int32_t, int32_t>>* copies) {
  Impl& s = *impl_;
  DI_CHECK(copies != nullptr);
  DI_CHECK(!s.seqs.contains(child_seq_id), "fork into existing sequence " << child_seq_id);
  const Impl::Sequence& parent = s.at(parent_seq_id);
  const int32_t bs = s.config.block_size;
  // Only computed tokens are shared; blocks the parent holds beyond them carry no data yet.
  const int32_t num_full = parent.num_computed_tokens / bs;
  const bool has_partial = parent.num_computed_tokens % bs != 0;
  if (has_partial && !s.pool.can_allocate(1)) return false;

  Impl::Sequence child;
  child.block_table.assign(parent.block_table.begin(), parent.block_table.begin() + num_full);
  for (int32_t block_id : child.block_table) {
    if (block_id != kReleased) s.pool.incref(block_id);
  }
  if (has_partial) {
    // Both sequences write their next tokens into this block, so each needs its own copy.
    const int32_t src = parent.block_table[static_cast<size_t>(num_full)];
    DI_CHECK(src != kReleased, "the partial block of sequence " << parent_seq_id << " was released");
    const int32_t dst = s.pool.allocate(1).front();
    child.block_table.push_back(dst);
    copies->emplace_back(src, dst);
  }
  child.num_tokens = parent.num_computed_tokens;
  child.num_computed_tokens = parent.num_computed_tokens;
  child.num_hashed_blocks = parent.num_hashed_blocks;
  child.last_hash = parent.last_hash;
  child.num_released_blocks = parent.num_released_blocks;
  s.seqs.emplace(child_seq_id, std::move(child));
  return true;
}

void KvCacheManager::free(int64_t seq_id) {
  Impl& s = *impl_;
  const auto it = s.seqs.find(seq_id);
  if (it == s.seqs.end()) return;
  const std::vector<int32_t>& table = it->second.block_table;
  // Last block first: it reaches the LRU list earliest and is evicted before its ancestors,
  // which more prefixes share and without which the chain's later blocks cannot be found.
  for (auto block = table.rbegin(); block != table.rend(); ++block) {
    if (*block != kReleased) s.pool.decref(*block);
  }
  s.seqs.erase(it);
}

bool KvCacheManager::has(int64_t seq_id) const { return impl_->seqs.contains(seq_id); }

const std::vector<int32_t>& KvCacheManager::block_table(int64_t seq_id) const {
  return impl_->at(seq_id).block_table;
}

const PrefixCacheStats& KvCacheManager::stats() const { return impl_->stats; }

void KvCacheManager::check_invariants() const {
  const Impl& s = *impl_;
  s.pool.check_invariants();
  const int32_t bs = s.config.block_size;
  std::vector<int32_t> refs(static_cast<size_t>(s.pool.num_blocks()), 0);
  for (const auto& [seq_id, seq] : s.seqs) {
    DI_CHECK(static_cast<int32_t>(seq.block_table.size()) == blocks_for_tokens(seq.num_tokens, bs),
             "sequence " << seq_id << " has " << seq.block_table.size() << " blocks for " << seq.num_tokens << " tokens");
    DI_CHECK(seq.num_computed_tokens <= seq.num_tokens);
    DI_CHECK(seq.num_hashed_blocks == (s.config.enable_prefix_caching ? seq.num_computed_tokens / bs : 0),
             "sequence " << seq_id << " hashed " << seq.num_hashed_blocks << " blocks of " << seq.num_computed_tokens
                         << " computed tokens");
    DI_CHECK(seq.num_released_blocks == s.num_releasable_blocks(seq.num_computed_tokens));
    for (size_t i = 0; i < seq.block_table.size(); ++i) {
      const int32_t block_id = seq.block_table[i];
      DI_CHECK((block_id == kReleased) == (static_cast<int32_t>(i) < seq.num_released_blocks),
               "sequence " << seq_id << " entry " << i << " is " << block_id);
      if (block_id != kReleased) ++refs[static_cast<size_t>(block_id)];
    }
  }
  for (int32_t id = 0; id < s.pool.num_blocks(); ++id) {
    DI_CHECK(s.pool.ref_count(id) == refs[static_cast<size_t>(id)],
             "block " << id << " has ref_count " << s.pool.ref_count(id) << " but " << refs[static_cast<size_t>(id)]
                      << " table entries");
  }
}

}  // namespace deepinfer
