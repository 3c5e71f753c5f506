// Strict base64 decoding: RFC 4648's test vectors, and every malformed input named.
#include <gtest/gtest.h>

#include <string>

#include "core/base64.h"

namespace deepinfer {
namespace {

std::string decoded(std::string_view text) {
  Result<std::vector<uint8_t>> bytes = try_decode_base64(text);
  EXPECT_TRUE(bytes.ok()) << text << ": " << (bytes.ok() ? "" : bytes.error().message);
  return bytes.ok() ? std::string(bytes->begin(), bytes->end()) : "";
}

std::string error_of(std::string_view text) {
  Result<std::vector<uint8_t>> bytes = try_decode_base64(text);
  EXPECT_FALSE(bytes.ok()) << text;
  return bytes.ok() ? "" : bytes.error().message;
}

TEST(Base64, Rfc4648Vectors) {
  EXPECT_EQ(decoded(""), "");
  EXPECT_EQ(decoded("Zg=="), "f");
  EXPECT_EQ(decoded("Zm8="), "fo");
  EXPECT_EQ(decoded("Zm9v"), "foo");
  EXPECT_EQ(decoded("Zm9vYg=="), "foob");
  EXPECT_EQ(decoded("Zm9vYmE="), "fooba");
  EXPECT_EQ(decoded("Zm9vYmFy"), "foobar");
  EXPECT_EQ(decoded("+/8="), std::string("\xfb\xff"));
}

TEST(Base64, MalformedInputIsNamed) {
  EXPECT_EQ(error_of("Zm9vYg"),
            "base64 data is 6 characters long, not a multiple of 4 (cut short, or missing its '=' padding?)");
  EXPECT_EQ(error_of("Zm9v YmE="),
            "base64 data is 9 characters long, not a multiple of 4 (cut short, or missing its '=' padding?)");
  EXPECT_EQ(error_of("Zm9\nYmFy"), "base64 data has byte 0x0a at offset 3, which is not in the base64 alphabet");
  EXPECT_EQ(error_of("Zm-vYmFy"),
            "base64 data has '-' at offset 2, which is not in the base64 alphabet (URL-safe base64 is not accepted)");
  EXPECT_EQ(error_of("Zg==Zm9v"),
            "base64 data has '=' at offset 2, which is not in the base64 alphabet (padding before the end)");
  EXPECT_EQ(error_of("Zh=="), "base64 data has nonzero bits after its last byte (offset 1): not a canonical encoding");
}

}  // namespace
}  // namespace deepinfer
