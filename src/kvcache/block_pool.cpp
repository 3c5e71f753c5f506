// BlockPool: a free stack, an intrusive LRU list of evictable cached blocks and a hash index,
// so that every operation except check_invariants is O(1) per block.
#include "kvcache/block_pool.h"

#include <unordered_map>

#include "core/check.h"

namespace deepinfer {

namespace {
constexpr int32_t kNone = -1;
}  // namespace

struct BlockPool::Impl {
  struct Block {
    int32_t ref_count = 0;
    bool has_hash = false;
    bool evictable = false;  // on the LRU list
    BlockHash hash{};
    int32_t lru_prev = kNone;  // towards the least recently released end
    int32_t lru_next = kNone;
  };

  std::vector<Block> blocks;
  // Free blocks (no hash), popped from the back: a fresh pool hands out 0, 1, 2, ...
  std::vector<int32_t> free_ids;
  int32_t lru_head = kNone;  // evicted first
  int32_t lru_tail = kNone;
  int32_t num_evictable = 0;
  std::unordered_map<BlockHash, int32_t, BlockHashHasher> index;

  void check_id(int32_t block_id) const {
    DI_CHECK(block_id >= 0 && block_id < static_cast<int32_t>(blocks.size()), "block id " << block_id << " out of range");
  }
  Block& at(int32_t block_id) {
    check_id(block_id);
    return blocks[static_cast<size_t>(block_id)];
  }
  const Block& at(int32_t block_id) const {
    check_id(block_id);
    return blocks[static_cast<size_t>(block_id)];
  }

  void lru_push_back(int32_t block_id) {
    Block& block = at(block_id);
    block.evictable = true;
    block.lru_prev = lru_tail;
    block.lru_next = kNone;
    if (lru_tail != kNone) at(lru_tail).lru_next = block_id;
    lru_tail = block_id;
    if (lru_head == kNone) lru_head = block_id;
    ++num_evictable;
  }

  void lru_remove(int32_t block_id) {
    Block& block = at(block_id);
    DI_CHECK(block.evictable);
    if (block.lru_prev != kNone) {
      at(block.lru_prev).lru_next = block.lru_next;
    } else {
      lru_head = block.lru_next;
    }
    if (block.lru_next != kNone) {
      at(block.lru_next).lru_prev = block.lru_prev;
    } else {
      lru_tail = block.lru_prev;
    }
    block.evictable = false;
    block.lru_prev = block.lru_next = kNone;
    --num_evictable;
  }
};

BlockPool::BlockPool(int32_t num_blocks) : impl_(std::make_unique<Impl>()) {
  DI_CHECK(num_blocks >= 0);
  impl_->blocks.resize(static_cast<size_t>(num_blocks));
  impl_->free_ids.reserve(static_cast<size_t>(num_blocks));
  for (int32_t id = num_blocks - 1; id >= 0; --id) impl_->free_ids.push_back(id);
  impl_->index.reserve(static_cast<size_t>(num_blocks));
}

BlockPool::~BlockPool() = default;
BlockPool::BlockPool(BlockPool&&) noexcept = default;
BlockPool& BlockPool::operator=(BlockPool&&) noexcept = default;

int32_t BlockPool::num_blocks() const { return static_cast<int32_t>(impl_->blocks.size()); }

int32_t BlockPool::num_free_blocks() const {
  return static_cast<int32_t>(impl_->free_ids.size()) + impl_->num_evictable;
}

int32_t BlockPool::num_evictable_blocks() const { return impl_->num_evictable; }

std::vector<int32_t> BlockPool::allocate(int32_t count) {
  DI_CHECK(count >= 0 && can_allocate(count), "asked for " << count << " blocks, " << num_free_blocks() << " free");
  Impl& s = *impl_;
  std::vector<int32_t> ids;
  ids.reserve(static_cast<size_t>(count));
  for (int32_t i = 0; i < count; ++i) {
    int32_t id = kNone;
    if (!s.free_ids.empty()) {
      id = s.free_ids.back();
      s.free_ids.pop_back();
    } else {
      id = s.lru_head;
      s.lru_remove(id);
      Impl::Block& evicted = s.at(id);
      s.index.erase(evicted.hash);
      evicted.has_hash = false;
    }
    s.at(id).ref_count = 1;
    ids.push_back(id);
  }
  return ids;
}

void BlockPool::incref(int32_t block_id) {
  Impl::Block& block = impl_->at(block_id);
  if (block.ref_count == 0) {
    DI_CHECK(block.evictable, "incref of free block " << block_id << ": only cached blocks can be revived");
    impl_->lru_remove(block_id);
  }
  ++block.ref_count;
}

void BlockPool::decref(int32_t block_id) {
  Impl::Block& block = impl_->at(block_id);
  DI_CHECK(block.ref_count > 0, "decref of unreferenced block " << block_id);
  if (--block.ref_count > 0) return;
  if (block.has_hash) {
    impl_->lru_push_back(block_id);
  } else {
    impl_->free_ids.push_back(block_id);
  }
}

int32_t BlockPool::ref_count(int32_t block_id) const { return impl_->at(block_id).ref_count; }

std::optional<int32_t> BlockPool::find_cached(const BlockHash& hash) const {
  const auto it = impl_->index.find(hash);
  if (it == impl_->index.end()) return std::nullopt;
  return it->second;
}

void BlockPool::register_hash(int32_t block_id, const BlockHash& hash) {
  Impl::Block& block = impl_->at(block_id);
  DI_CHECK(block.ref_count > 0, "register_hash on unreferenced block " << block_id);
  if (block.has_hash) {
    // A block's contents never change while it is held, so neither does its hash.
    DI_CHECK(block.hash == hash, "block " << block_id << " is already registered under another hash");
    return;
  }
  if (!impl_->index.emplace(hash, block_id).second) return;
  block.has_hash = true;
  block.hash = hash;
}

void BlockPool::check_invariants() const {
  const Impl& s = *impl_;
  const auto num = static_cast<size_t>(s.blocks.size());
  std::vector<bool> on_free_stack(num, false);
  for (int32_t id : s.free_ids) {
    const Impl::Block& block = s.at(id);
    DI_CHECK(!on_free_stack[static_cast<size_t>(id)], "block " << id << " is on the free stack twice");
    on_free_stack[static_cast<size_t>(id)] = true;
    DI_CHECK(block.ref_count == 0 && !block.has_hash && !block.evictable, "free block " << id << " is in use or cached");
  }
  int32_t walked = 0;
  int32_t prev = kNone;
  for (int32_t id = s.lru_head; id != kNone; id = s.at(id).lru_next) {
    const Impl::Block& block = s.at(id);
    DI_CHECK(walked < s.num_evictable, "the LRU list is longer than its count (a cycle?)");
    DI_CHECK(block.evictable && block.ref_count == 0 && block.has_hash, "LRU block " << id << " is not evictable");
    DI_CHECK(!on_free_stack[static_cast<size_t>(id)], "block " << id << " is both free and evictable");
    DI_CHECK(block.lru_prev == prev, "LRU back link of block " << id << " is broken");
    prev = id;
    ++walked;
  }
  DI_CHECK(walked == s.num_evictable && prev == s.lru_tail, "LRU list and its count disagree");
  size_t num_hashed = 0;
  for (size_t id = 0; id < num; ++id) {
    const Impl::Block& block = s.blocks[id];
    DI_CHECK(block.ref_count >= 0);
    const bool in_use = block.ref_count > 0;
    DI_CHECK(static_cast<int>(in_use) + static_cast<int>(block.evictable) + static_cast<int>(on_free_stack[id]) == 1,
             "block " << id << " is not in exactly one of free / evictable / in use");
    if (!block.has_hash) continue;
    ++num_hashed;
    const auto it = s.index.find(block.hash);
    DI_CHECK(it != s.index.end() && it->second == static_cast<int32_t>(id), "block " << id << " has a hash the index lacks");
  }
  DI_CHECK(num_hashed == s.index.size(), "the hash index holds entries for blocks without a hash");
}

}  // namespace deepinfer
