// KvCacheManager: page tables per sequence over a BlockPool (two tables and pools when sliding-
// window and full-attention layers are mixed), with prefix caching. The
// scheduler asks it for room before scheduling tokens and tells it what was computed after
// each step. CPU bookkeeping only; not thread-safe (the engine thread owns it).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "kvcache/block_pool.h"
#include "kvcache/prefix_hash.h"

namespace deepinfer {

struct KvCacheConfig {
  int32_t num_blocks = 0;
  int32_t block_size = 128;
  bool enable_prefix_caching = true;
  // Model, dtype, KV layout and code version: seeds every hash chain.
  std::string model_fingerprint;
  // > 0: blocks wholly before this window of the sequence's next token are released (their
  // table entries become -1) from the tables of the layers that use it: every layer's when
  // num_swa_blocks is 0, else only the sliding-window layers' own tables (below).
  int32_t sliding_window = 0;
  // > 0 for a model that mixes sliding-window and full-attention layers: each sequence then has
  // two page tables, block_table() for the full-attention layers (every page kept) and
  // swa_block_table() for the sliding-window layers, over a second pool of this many blocks,
  // so the sliding layers' KV memory is bounded by the window instead of the sequence length.
  int32_t num_swa_blocks = 0;
};

struct PrefixCacheStats {
  int64_t queried_tokens = 0;  // prompt tokens looked up
  int64_t hit_tokens = 0;      // of those, found cached
};

class KvCacheManager {
 public:
  explicit KvCacheManager(const KvCacheConfig& config);
  ~KvCacheManager();
  KvCacheManager(KvCacheManager&&) noexcept;
  KvCacheManager& operator=(KvCacheManager&&) noexcept;

  int32_t block_size() const;
  int32_t num_free_blocks() const;
  int32_t num_blocks() const;
  // Fraction of blocks in use (not free, not evictable).
  double usage() const;

  // The empty hash chain of a sequence under cache_salt, for the lookups below: a caller that
  // looks one sequence up again and again (a waiting request, every step) keeps it, so that each
  // block is hashed once.
  BlockHashChain new_hash_chain(std::string_view cache_salt) const;

  // How many leading tokens of a new sequence's tokens are cached: whole blocks only, and
  // always fewer than tokens.size() (the last token must run to give logits). Changes nothing
  // but hashes, which it extends as far as it looks (hashes: of these tokens, from
  // new_hash_chain of their cache salt).
  int32_t num_cached_tokens(std::span<const int32_t> tokens, std::string_view cache_salt) const;
  int32_t num_cached_tokens(std::span<const int32_t> tokens, BlockHashChain& hashes) const;

  // Makes seq_id's table cover its first num_tokens tokens. On the sequence's first call it
  // first takes the cached prefix blocks (counted in stats) and returns how many tokens they
  // hold through num_cached_tokens (0 on later calls). Returns false and changes nothing when
  // there are not enough free blocks. hashes: as for num_cached_tokens (read only on the first
  // call).
  bool allocate(int64_t seq_id, std::span<const int32_t> tokens, int32_t num_tokens, std::string_view cache_salt,
                int32_t* num_cached_tokens);
  bool allocate(int64_t seq_id, std::span<const int32_t> tokens, int32_t num_tokens, BlockHashChain& hashes,
                int32_t* num_cached_tokens);

  // allocate() of a new sequence whose KV the caller writes from outside the cache (the
  // persistent store's pages plus a replay of the sliding-window layers from token swa_start, a
  // multiple of block_size, on). Unless the prefix hit already reaches swa_start, the tables of
  // windowed groups hold no block before swa_start (-1): those layers' KV there is never
  // computed, so it is never registered in the prefix index. The caller commits num_tokens.
  bool allocate_imported(int64_t seq_id, std::span<const int32_t> tokens, int32_t num_tokens,
                         std::string_view cache_salt, int32_t swa_start, int32_t* num_cached_tokens);

  // After a step computed tokens [0, num_computed) of seq_id: registers its newly full blocks
  // in the prefix index and releases blocks outside the sliding window. num_computed never
  // shrinks (commit only accepted tokens) and tokens holds at least num_computed ids.
  void commit_computed(int64_t seq_id, std::span<const int32_t> tokens, int32_t num_computed);

  // n > 1: child gets parent's table, full blocks shared (ref counted); the partial last block
  // is copied into a fresh block. Returns the (src, dst) block pairs the caller must copy on the
  // device before the child's next step (appended to copies; those of the sliding-window tables
  // to swa_copies, required when num_swa_blocks > 0). False when there is no free block for a
  // copy. The child covers the parent's computed tokens (call after commit_computed).
  bool fork(int64_t parent_seq_id, int64_t child_seq_id, std::vector<std::pair<int32_t, int32_t>>* copies,
            std::vector<std::pair<int32_t, int32_t>>* swa_copies = nullptr);

  // Drops the sequence's references (preemption, finish, abort). Unknown ids are ignored.
  void free(int64_t seq_id);
  bool has(int64_t seq_id) const;
  // The sequence's block ids in order; -1 where a sliding-window block was released.
  const std::vector<int32_t>& block_table(int64_t seq_id) const;
  // With num_swa_blocks > 0: the sliding-window layers' table (ids in their own pool, the same
  // length as block_table, -1 for released blocks). Empty otherwise.
  const std::vector<int32_t>& swa_block_table(int64_t seq_id) const;
  bool has_swa_tables() const;
  int32_t num_swa_blocks() const;  // the sliding-window pool's size; 0 without separate tables
  // Blocks of the sliding-window pool in use by some table (not free, not evictable).
  int32_t num_used_swa_blocks() const;

  const PrefixCacheStats& stats() const;
  // Asserts pool and tables agree: every table entry holds a reference, ref counts equal the
  // number of tables holding a block, nothing leaks.
  void check_invariants() const;

 private:
  // allocate_imported() with the prefix looked up along hashes.
  bool allocate_new(int64_t seq_id, std::span<const int32_t> tokens, int32_t num_tokens, BlockHashChain& hashes,
                    int32_t swa_start, int32_t* num_cached_tokens);

  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace deepinfer
