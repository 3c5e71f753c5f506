// Prefix-cache block identity: a SHA-256 hash chain over full blocks. Block i's hash covers
// its parent's hash, its token ids and extra keys, so equal hashes mean equal prefixes from the
// first token; the chain's root is seeded with the model fingerprint (model, dtype, KV layout)
// and the tenant's cache_salt.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string_view>

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

struct BlockHashHasher {
  size_t operator()(const BlockHash& hash) const;  // the first 8 bytes: already uniform
};

}  // namespace deepinfer
