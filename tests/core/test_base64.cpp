// Strict base64: RFC 4648's test vectors both ways, and every malformed input named.
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

TEST(Base64, EncodesTheRfc4648Vectors) {
  const auto encoded = [](std::string_view text) {
    return encode_base64({reinterpret_cast<const uint8_t*>(text.data()), text.size()});
  };
  EXPECT_EQ(encoded(""), "");
  EXPECT_EQ(encoded("f"), "Zg==");
  EXPECT_EQ(encoded("fo"), "Zm8=");
  EXPECT_EQ(encoded("foo"), "Zm9v");
  EXPECT_EQ(encoded("foob"), "Zm9vYg==");
  EXPECT_EQ(encoded("fooba"), "Zm9vYmE=");
  EXPECT_EQ(encoded("foobar"), "Zm9vYmFy");
  EXPECT_EQ(encoded("\xfb\xff"), "+/8=");
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
