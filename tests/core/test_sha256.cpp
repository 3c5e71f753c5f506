// SHA-256 against NIST's example vectors (FIPS 180-4 examples, the SHA-256 short/long messages).
#include <gtest/gtest.h>

#include <string>
#include <string_view>

#include "core/sha256.h"

namespace deepinfer {
namespace {

std::string sha256_hex(std::string_view text) {
  return to_hex(sha256(std::span(reinterpret_cast<const uint8_t*>(text.data()), text.size())));
}

TEST(Sha256, NistVectors) {
  EXPECT_EQ(sha256_hex(""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(sha256_hex("abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(sha256_hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"),
            "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  EXPECT_EQ(
      sha256_hex("abcdefghbcdefghicdefghijdefghijkefghijklfghijklmghijklmnhijklmnoijklmnopjklmnopqklmnopqrlmnopqrs"
                 "mnopqrstnopqrstu"),
      "cf5b16a778af8380036ce59e7b0492370b249b11e8f07a51afac45037afee9d1");
  EXPECT_EQ(sha256_hex(std::string(1000000, 'a')), "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST(Sha256, PiecesEqualTheWhole) {
  Sha256 sha;
  sha.update("ab", 2);
  sha.update("c", 1);
  EXPECT_EQ(to_hex(sha.finish()), sha256_hex("abc"));
}

}  // namespace
}  // namespace deepinfer
