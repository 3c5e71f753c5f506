// Page images: a round trip returns the payload; every identity mismatch and every corruption
// (bit flip anywhere, truncation, zeroed header) is rejected.
#include <gtest/gtest.h>

#include <cstring>

#include "kvstore_test_util.h"
#include "kvstore/page_format.h"

namespace deepinfer {
namespace {

using testing::make_chain;

struct Encoded {
  testing::TestPage page;
  SharedPage image;
  PageIdentity identity;
};

Encoded encode_test_page() {
  Encoded e;
  e.page = make_chain(1, 16, 300).front();
  e.identity = PageIdentity{e.page.request.hash, layout_id_of("layout"), 0, e.page.request.token_ids};
  PageContent content{e.identity, TrafficClass::kChat, 1234, e.page.payload};
  e.image = encode_page(content, default_host_allocator());
  return e;
}

std::vector<uint8_t> copy_of(const SharedPage& image) { return {image->data(), image->data() + image->size()}; }

TEST(PageFormat, RoundTripReturnsThePayload) {
  const Encoded e = encode_test_page();
  EXPECT_EQ(e.image->size(), page_image_bytes(16, 300));
  auto payload = verify_page(e.image->bytes(), e.identity);
  ASSERT_TRUE(payload.ok()) << payload.error().message;
  EXPECT_EQ(std::vector<uint8_t>(payload->begin(), payload->end()), e.page.payload);
  auto header = parse_page_header(e.image->bytes(), e.image->size());
  ASSERT_TRUE(header.ok());
  EXPECT_EQ(header->traffic_class, static_cast<uint8_t>(TrafficClass::kChat));
  EXPECT_EQ(header->created_unix_s, 1234u);
}

TEST(PageFormat, IdentityMismatchesAreRejected) {
  const Encoded e = encode_test_page();
  PageIdentity other_layout = e.identity;
  other_layout.layout_id = layout_id_of("another layout");
  EXPECT_FALSE(verify_page(e.image->bytes(), other_layout).ok());
  PageIdentity other_index = e.identity;
  other_index.page_index = 1;
  EXPECT_FALSE(verify_page(e.image->bytes(), other_index).ok());
  PageIdentity other_hash = e.identity;
  other_hash.chain_hash[5] ^= 1;
  EXPECT_FALSE(verify_page(e.image->bytes(), other_hash).ok());
  std::vector<int32_t> tokens = e.page.request.token_ids;
  tokens[3] += 1;
  PageIdentity other_tokens = e.identity;
  other_tokens.token_ids = tokens;
  auto verdict = verify_page(e.image->bytes(), other_tokens);
  ASSERT_FALSE(verdict.ok());
  EXPECT_NE(verdict.error().message.find("token ids"), std::string::npos) << verdict.error().message;
}

TEST(PageFormat, EveryFlippedByteIsDetected) {
  const Encoded e = encode_test_page();
  const std::vector<uint8_t> good = copy_of(e.image);
  // Every byte of the header and the tokens, then a stride through the payload.
  for (size_t at = 0; at < good.size(); at += at < 200 ? 1 : 7) {
    std::vector<uint8_t> bad = good;
    bad[at] ^= 0x10;
    EXPECT_FALSE(verify_page(bad, e.identity).ok()) << "flip at byte " << at;
  }
}

TEST(PageFormat, TruncatedAndZeroedImagesAreRejected) {
  const Encoded e = encode_test_page();
  const std::vector<uint8_t> good = copy_of(e.image);
  for (size_t size : {size_t{0}, size_t{10}, sizeof(PageHeader), good.size() - 1}) {
    const std::vector<uint8_t> cut(good.begin(), good.begin() + static_cast<ptrdiff_t>(size));
    EXPECT_FALSE(verify_page(cut, e.identity).ok()) << "truncated to " << size;
  }
  std::vector<uint8_t> zeroed = good;
  std::memset(zeroed.data(), 0, sizeof(PageHeader));
  EXPECT_FALSE(verify_page(zeroed, e.identity).ok());
  EXPECT_FALSE(parse_page_header(zeroed, zeroed.size()).ok());
}

TEST(PageFormat, HashHexIsLowercaseHex) {
  BlockHash hash{};
  hash[0] = 0xab;
  hash[31] = 0x01;
  const std::string hex = hash_hex(hash);
  EXPECT_EQ(hex.size(), 64u);
  EXPECT_EQ(hex.substr(0, 2), "ab");
  EXPECT_EQ(hex.substr(62), "01");
}

}  // namespace
}  // namespace deepinfer
