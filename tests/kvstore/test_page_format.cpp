// Page images: a round trip returns the payload; every identity mismatch and every corruption
// (any single bit flipped, truncation, zero-filled tail, zeroed header) is rejected.
#include <gtest/gtest.h>

#include <algorithm>
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

// The header checksum covers every header byte before it (the body checksum among them) and the
// body checksum every byte after the header, so no single bit of the image can change unseen,
// whether a load checks it in one step or in two (the body beside the upload).
TEST(PageFormat, EveryFlippedBitIsDetected) {
  const Encoded e = encode_test_page();
  const std::vector<uint8_t> good = copy_of(e.image);
  for (size_t at = 0; at < good.size(); ++at) {
    for (int bit = 0; bit < 8; ++bit) {
      std::vector<uint8_t> bad = good;
      bad[at] ^= static_cast<uint8_t>(1 << bit);
      EXPECT_FALSE(verify_page(bad, e.identity).ok()) << "bit " << bit << " of byte " << at;
      EXPECT_FALSE(verify_page_identity(bad, e.identity).ok() && verify_page_body(bad).ok())
          << "bit " << bit << " of byte " << at;
    }
  }
}

// A torn write that kept the file's size: its end is zeros.
TEST(PageFormat, ZeroFilledTailsAreRejected) {
  const Encoded e = encode_test_page();
  const std::vector<uint8_t> good = copy_of(e.image);
  for (size_t tail = 1; tail <= good.size(); tail = tail * 2 + 1) {
    std::vector<uint8_t> torn = good;
    std::fill(torn.end() - static_cast<ptrdiff_t>(tail), torn.end(), uint8_t{0});
    if (torn == good) continue;
    EXPECT_FALSE(verify_page(torn, e.identity).ok()) << "last " << tail << " bytes zeroed";
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
