// Prefix-cache block identity: a SHA-256 hash chain over full blocks. Block i's hash covers
// its parent's hash, its token ids and extra keys, so equal hashes mean equal prefixes from the
// first token; the chain's root is seeded with the model fingerprint (model, dtype, KV layout)
// and the tenant's cache_salt.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string_view>
#include <vector>

namespace deepinfer {

using BlockHash = std::array<uint8_t, 32>;

// The chain's root: SHA-256 over the model fingerprint and the cache salt (empty: no tenant).
// Bytes hashed: u64le(fingerprint size) || fingerprint || u64le(salt size) || salt, so no
// (fingerprint, salt) pair can pose as another.
BlockHash prefix_root_hash(std::string_view model_fingerprint, std::string_view cache_salt);

// SHA-256(parent || token ids as little-endian int32 || extra_keys). Unambiguous within one
// index because every hashed block holds exactly block_size tokens.
BlockHash chain_block_hash(const BlockHash& parent, const int32_t* token_ids, int32_t num_tokens,
                           std::string_view extra_keys);

// The chain hashes of one sequence's leading full blocks, kept as the sequence grows so that each
// block is hashed once however often its prefix is looked up (a request waiting for room is
// looked up every step). Its blocks carry no extra keys, like KvCacheManager's.
class BlockHashChain {
 public:
  BlockHashChain(const BlockHash& root, int32_t block_size);

  // Hashes the full blocks of tokens beyond the num_blocks() already hashed. tokens must begin
  // with the tokens those blocks hold (the sequence only grows).
  void extend(std::span<const int32_t> tokens);
  const BlockHash& root() const { return root_; }
  int32_t block_size() const { return block_size_; }
  int32_t num_blocks() const { return static_cast<int32_t>(hashes_.size()); }
  // The chain hash of block i < num_blocks().
  const BlockHash& hash(int32_t i) const { return hashes_[static_cast<size_t>(i)]; }

 private:
  BlockHash root_;
  int32_t block_size_;
  std::vector<BlockHash> hashes_;
};

// A run of an image's placeholder tokens in a prompt and the image's content hash.
struct ImagePlaceholders {
  int32_t first_token = 0;
  int32_t num_tokens = 0;
  BlockHash hash{};
};

// tokens as the prefix cache names them: each image's placeholders replaced by ids made from its
// hash (negative, below -1, so never a token id nor the engine's pending token), so prompts that
// differ only in their images name different blocks. Runs lie inside tokens, in order.
std::vector<int32_t> image_cache_tokens(std::span<const int32_t> tokens, std::span<const ImagePlaceholders> images);

struct BlockHashHasher {
  size_t operator()(const BlockHash& hash) const;  // the first 8 bytes: already uniform
};

}  // namespace deepinfer
