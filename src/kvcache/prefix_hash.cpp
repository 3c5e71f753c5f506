// SHA-256 hash chain for prefix caching (core/sha256.h).
#include "kvcache/prefix_hash.h"

#include <algorithm>
#include <cstring>

#include "core/check.h"
#include "core/sha256.h"

namespace deepinfer {

BlockHash prefix_root_hash(std::string_view model_fingerprint, std::string_view cache_salt) {
  Sha256 sha;
  sha.update_u64le(model_fingerprint.size());
  sha.update(model_fingerprint.data(), model_fingerprint.size());
  sha.update_u64le(cache_salt.size());
  sha.update(cache_salt.data(), cache_salt.size());
  return sha.finish();
}

BlockHash chain_block_hash(const BlockHash& parent, const int32_t* token_ids, int32_t num_tokens,
                           std::string_view extra_keys) {
  DI_CHECK(num_tokens >= 0 && (num_tokens == 0 || token_ids != nullptr));
  Sha256 sha;
  sha.update(parent.data(), parent.size());
  // Serialised explicitly so the hashes (and a future on-disk index) agree across hosts.
  constexpr int32_t kChunkTokens = 256;
  uint8_t bytes[kChunkTokens * 4];
  for (int32_t begin = 0; begin < num_tokens; begin += kChunkTokens) {
    const int32_t count = std::min(kChunkTokens, num_tokens - begin);
    for (int32_t i = 0; i < count; ++i) {
      const auto value = static_cast<uint32_t>(token_ids[begin + i]);
      for (int b = 0; b < 4; ++b) bytes[4 * i + b] = static_cast<uint8_t>(value >> (8 * b));
    }
    sha.update(bytes, static_cast<size_t>(count) * 4);
  }
  sha.update(extra_keys.data(), extra_keys.size());
  return sha.finish();
}

BlockHashChain::BlockHashChain(const BlockHash& root, int32_t block_size) : root_(root), block_size_(block_size) {
  DI_CHECK(block_size > 0, "block_size " << block_size);
}

void BlockHashChain::extend(std::span<const int32_t> tokens) {
  const auto num_full = static_cast<int32_t>(tokens.size() / static_cast<size_t>(block_size_));
  for (int32_t i = num_blocks(); i < num_full; ++i) {
    const BlockHash& parent = i == 0 ? root_ : hashes_.back();
    hashes_.push_back(chain_block_hash(parent, tokens.data() + static_cast<ptrdiff_t>(i) * block_size_, block_size_, {}));
  }
}

std::vector<int32_t> image_cache_tokens(std::span<const int32_t> tokens, std::span<const ImagePlaceholders> images) {
  std::vector<int32_t> named(tokens.begin(), tokens.end());
  for (const ImagePlaceholders& image : images) {
    DI_CHECK(image.first_token >= 0 && image.num_tokens >= 0 &&
                 int64_t{image.first_token} + image.num_tokens <= static_cast<int64_t>(tokens.size()),
             "image placeholders " << image.first_token << " + " << image.num_tokens << " outside a prompt of "
                                   << tokens.size() << " tokens");
    for (int32_t i = 0; i < image.num_tokens; ++i) {
      // 30 bits of the hash per token, a different 4 bytes for each of eight neighbours, and the
      // token's index in the image: any block holding part of an image carries that part's place
      // and, from eight tokens on, 240 of the hash's 256 bits.
      uint32_t word = 0;
      for (int b = 0; b < 4; ++b) {
        word |= static_cast<uint32_t>(image.hash[static_cast<size_t>((4 * i + b) % 32)]) << (8 * b);
      }
      const uint32_t mixed = (word ^ (static_cast<uint32_t>(i) * 0x9e3779b1u)) & 0x3fffffffu;
      named[static_cast<size_t>(image.first_token + i)] = -2 - static_cast<int32_t>(mixed);
    }
  }
  return named;
}

size_t BlockHashHasher::operator()(const BlockHash& hash) const {
  uint64_t prefix = 0;
  std::memcpy(&prefix, hash.data(), sizeof(prefix));
  return static_cast<size_t>(prefix);
}

}  // namespace deepinfer
