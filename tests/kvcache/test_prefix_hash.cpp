// Prefix hash chain: SHA-256 published vectors and hashlib-computed digests of the documented
// byte layouts (the oracle), plus the chain's sensitivity to every input.
#include "kvcache/prefix_hash.h"

#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <string>
#include <vector>

namespace deepinfer {
namespace {

std::string hex(const BlockHash& hash) {
  static const char* kDigits = "0123456789abcdef";
  std::string out;
  for (uint8_t byte : hash) {
    out.push_back(kDigits[byte >> 4]);
    out.push_back(kDigits[byte & 15]);
  }
  return out;
}

// Four ASCII bytes as the little-endian int32 the chain serialises them back to.
int32_t le_word(const char* four) {
  return static_cast<int32_t>(static_cast<uint32_t>(static_cast<uint8_t>(four[0])) |
                              static_cast<uint32_t>(static_cast<uint8_t>(four[1])) << 8 |
                              static_cast<uint32_t>(static_cast<uint8_t>(four[2])) << 16 |
                              static_cast<uint32_t>(static_cast<uint8_t>(four[3])) << 24);
}

TEST(PrefixHash, ChainLayoutMatchesNistVector) {
  // FIPS 180-2 test vector: the 56-byte message split as parent (32) || 4 tokens (16) || extra (8).
  const char* message = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
  BlockHash parent{};
  std::memcpy(parent.data(), message, 32);
  const std::vector<int32_t> tokens = {le_word(message + 32), le_word(message + 36), le_word(message + 40),
                                       le_word(message + 44)};
  EXPECT_EQ(hex(chain_block_hash(parent, tokens.data(), 4, std::string_view(message + 48, 8))),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
}

TEST(PrefixHash, TokensAreLittleEndianTwosComplement) {
  // hashlib.sha256(bytes(32) + struct.pack('<ii', -1, 0x01020304))
  const std::vector<int32_t> tokens = {-1, 0x01020304};
  EXPECT_EQ(hex(chain_block_hash(BlockHash{}, tokens.data(), 2, "")),
            "971f6860ea76edf73c5d9492d7558233c5750e4662f3a9d592fcee84beb95df7");
}

TEST(PrefixHash, RootLayoutIsLengthPrefixed) {
  // hashlib.sha256(pack('<Q', len(fp)) + fp + pack('<Q', len(salt)) + salt)
  EXPECT_EQ(hex(prefix_root_hash("llama-3-8b/bf16/kv128", "tenant-a")),
            "6c7ee8302db18ba5f8fdf0b9e70c78f33dae448be312cf3574e94b500a39560c");
  EXPECT_EQ(hex(prefix_root_hash("", "")), "374708fff7719dd5979ec875d56cd2286f6d3cf7ec317a3b25632aab28ec37bb");
  // Moving a byte from the fingerprint to the salt changes the root.
  EXPECT_NE(prefix_root_hash("ab", ""), prefix_root_hash("a", "b"));
}

TEST(PrefixHash, EveryInputChangesTheHash) {
  const BlockHash root = prefix_root_hash("model", "");
  const std::vector<int32_t> tokens = {1, 2, 3, 4};
  const std::vector<int32_t> swapped = {2, 1, 3, 4};
  const BlockHash base = chain_block_hash(root, tokens.data(), 4, "");
  EXPECT_EQ(base, chain_block_hash(root, tokens.data(), 4, ""));
  EXPECT_NE(base, chain_block_hash(prefix_root_hash("model", "salt"), tokens.data(), 4, ""));
  EXPECT_NE(base, chain_block_hash(prefix_root_hash("other", ""), tokens.data(), 4, ""));
  EXPECT_NE(base, chain_block_hash(root, swapped.data(), 4, ""));
  EXPECT_NE(base, chain_block_hash(root, tokens.data(), 4, "lora:7"));
  EXPECT_NE(base, chain_block_hash(base, tokens.data(), 4, ""));
}

TEST(PrefixHash, LongBlocksHashLikeOneBuffer) {
  // More tokens than one serialisation chunk: compare against the same bytes hashed whole
  // through the NIST-checked layout (a parent of 32 bytes, then the tokens as extra keys).
  std::vector<int32_t> tokens(1000);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = static_cast<int32_t>(i * 2654435761u);
  std::string bytes(tokens.size() * 4, '\0');
  for (size_t i = 0; i < tokens.size(); ++i) {
    for (size_t b = 0; b < 4; ++b) bytes[4 * i + b] = static_cast<char>(static_cast<uint32_t>(tokens[i]) >> (8 * b));
  }
  const BlockHash parent = prefix_root_hash("m", "");
  EXPECT_EQ(chain_block_hash(parent, tokens.data(), 1000, ""), chain_block_hash(parent, nullptr, 0, bytes));
}

TEST(PrefixHash, GrowingChainEqualsTheChainHashedFromScratch) {
  // Sequences grown by random steps (one token to several blocks, as decode steps and prefill
  // chunks grow them): after every step the chain holds each full block's hash, equal to the
  // chain recomputed from the root over the whole sequence.
  std::mt19937 rng(30);
  for (int trial = 0; trial < 50; ++trial) {
    const int32_t block_size = std::uniform_int_distribution<int32_t>(1, 9)(rng);
    const BlockHash root = prefix_root_hash("model", "salt-" + std::to_string(trial));
    BlockHashChain chain(root, block_size);
    std::vector<int32_t> tokens;
    const auto length = std::uniform_int_distribution<size_t>(0, 200)(rng);
    while (tokens.size() < length) {
      const auto step = std::uniform_int_distribution<size_t>(1, static_cast<size_t>(3 * block_size))(rng);
      for (size_t i = 0; i < step && tokens.size() < length; ++i) tokens.push_back(static_cast<int32_t>(rng()));
      chain.extend(tokens);
      const auto num_full = static_cast<int32_t>(tokens.size() / static_cast<size_t>(block_size));
      ASSERT_EQ(chain.num_blocks(), num_full);
      BlockHash expected = root;
      for (int32_t b = 0; b < num_full; ++b) {
        expected = chain_block_hash(expected, tokens.data() + static_cast<ptrdiff_t>(b) * block_size, block_size, "");
        ASSERT_EQ(chain.hash(b), expected) << "trial " << trial << ", block " << b << " of " << tokens.size();
      }
    }
  }
}

TEST(PrefixHash, HasherTakesTheFirstEightBytes) {
  BlockHash hash{};
  for (size_t i = 0; i < hash.size(); ++i) hash[i] = static_cast<uint8_t>(i + 1);
  uint64_t expected = 0;
  std::memcpy(&expected, hash.data(), 8);
  EXPECT_EQ(BlockHashHasher{}(hash), static_cast<size_t>(expected));
}

}  // namespace
}  // namespace deepinfer
