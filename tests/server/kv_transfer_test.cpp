// The KV push between a prefill and a decode worker: the frames round-trip a prefilled request
// byte for byte (sliding-window pages only from swa_first_block on); a truncated transfer, a
// corrupted byte, another model's identity, another block size or page size are refused with a
// message saying so; over loopback TCP the receiver keeps what it verified in its inbox and the
// sender hears the receiver's refusal.
#include <gtest/gtest.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/io_context.hpp>

#include "server/kv_transfer_wire.h"
#include "server/kv_transport.h"
#include "server/prefilled_inbox.h"

namespace deepinfer::server {
namespace {

KvLayout layout() {
  KvLayout l;
  l.model_identity = "model.safetensors=abc;tokenizer.json=def;";
  l.kv_dtype = DType::kBF16;
  l.block_size = 4;
  l.full_bytes_per_block = 24;
  l.swa_bytes_per_block = 8;
  return l;
}

// 10 prompt tokens: 3 blocks; the sliding layers' window from block 1.
PrefilledRequest request() {
  PrefilledRequest p;
  p.prompt_token_ids = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
  p.params.max_tokens = 7;
  p.params.seed = 42;
  p.first_token = 11;
  p.block_size = 4;
  p.swa_first_block = 1;
  for (int i = 0; i < 3 * 24; ++i) p.kv.push_back(static_cast<uint8_t>(i * 7));
  for (int i = 0; i < 2 * 8; ++i) p.swa_kv.push_back(static_cast<uint8_t>(255 - i));
  return p;
}

std::vector<std::vector<uint8_t>> encode_transfer(const std::string& transfer_id, const KvLayout& layout,
                                                  const PrefilledRequest& request) {
  const PrefilledKvFrames frames(transfer_id, layout, request);
  std::vector<std::vector<uint8_t>> encoded;
  for (size_t i = 0; i < frames.size(); ++i) encoded.push_back(frames.frame(i));
  return encoded;
}

std::vector<uint8_t> joined(const std::vector<std::vector<uint8_t>>& frames) {
  std::vector<uint8_t> bytes;
  for (const auto& frame : frames) bytes.insert(bytes.end(), frame.begin(), frame.end());
  return bytes;
}

std::string decode_error(const std::vector<uint8_t>& bytes, const KvLayout& expected) {
  Result<PrefilledRequest> decoded = decode_prefilled_transfer(bytes, expected, nullptr);
  return decoded.ok() ? "accepted" : decoded.error().message;
}

TEST(KvTransfer, FramesRoundTripEveryByte) {
  const std::vector<std::vector<uint8_t>> frames = encode_transfer("t-1", layout(), request());
  ASSERT_EQ(frames.size(), 1u + 3u + 2u + 1u);  // header, full pages, sliding pages, end
  std::string transfer_id;
  Result<PrefilledRequest> decoded = decode_prefilled_transfer(joined(frames), layout(), &transfer_id);
  ASSERT_TRUE(decoded.ok()) << decoded.error().message;
  EXPECT_EQ(transfer_id, "t-1");
  const PrefilledRequest want = request();
  EXPECT_EQ(decoded->prompt_token_ids, want.prompt_token_ids);
  EXPECT_EQ(decoded->first_token, 11);
  EXPECT_EQ(decoded->params.max_tokens, 7);
  EXPECT_EQ(decoded->params.seed, std::optional<uint64_t>(42));
  EXPECT_EQ(decoded->block_size, 4);
  EXPECT_EQ(decoded->swa_first_block, 1);
  EXPECT_EQ(decoded->kv, want.kv);
  EXPECT_EQ(decoded->swa_kv, want.swa_kv);
}

TEST(KvTransfer, TruncatedTransfersAreRefused) {
  const std::vector<uint8_t> bytes = joined(encode_transfer("t", layout(), request()));
  // Cut inside the last page's body, inside a frame header, and before the end frame.
  for (const size_t cut : {bytes.size() - kKvFrameHeaderBytes - 3, bytes.size() - kKvFrameHeaderBytes + 5,
                           bytes.size() - kKvFrameHeaderBytes}) {
    const std::vector<uint8_t> truncated(bytes.begin(), bytes.begin() + static_cast<ptrdiff_t>(cut));
    EXPECT_NE(decode_error(truncated, layout()).find("truncated"), std::string::npos)
        << cut << ": " << decode_error(truncated, layout());
  }
  // An end frame with pages missing.
  std::vector<std::vector<uint8_t>> frames = encode_transfer("t", layout(), request());
  frames.erase(frames.begin() + 2);
  EXPECT_NE(decode_error(joined(frames), layout()).find("1 of its 5 pages missing"), std::string::npos)
      << decode_error(joined(frames), layout());
}

TEST(KvTransfer, CorruptedBytesFailTheChecksum) {
  std::vector<uint8_t> bytes = joined(encode_transfer("t", layout(), request()));
  bytes[bytes.size() - kKvFrameHeaderBytes - 10] ^= 1;  // inside the last page
  EXPECT_NE(decode_error(bytes, layout()).find("checksum"), std::string::npos) << decode_error(bytes, layout());
}

TEST(KvTransfer, AnotherModelOrLayoutIsRefusedWithTheReason) {
  const std::vector<uint8_t> bytes = joined(encode_transfer("t", layout(), request()));
  KvLayout other_model = layout();
  other_model.model_identity = "model.safetensors=fff;";
  EXPECT_NE(decode_error(bytes, other_model).find("another model"), std::string::npos);
  KvLayout other_block = layout();
  other_block.block_size = 8;
  EXPECT_NE(decode_error(bytes, other_block).find("same --block-size"), std::string::npos);
  KvLayout other_dtype = layout();
  other_dtype.kv_dtype = DType::kF32;
  EXPECT_NE(decode_error(bytes, other_dtype).find("BF16 and this worker's cache is F32"), std::string::npos)
      << decode_error(bytes, other_dtype);
  KvLayout other_pages = layout();
  other_pages.full_bytes_per_block = 32;
  EXPECT_NE(decode_error(bytes, other_pages).find("bytes per block"), std::string::npos);
  // A page whose size disagrees with the header's layout.
  PrefilledRequest short_page = request();
  KvLayout lying = layout();
  lying.full_bytes_per_block = 20;
  std::vector<std::vector<uint8_t>> frames = encode_transfer("t", lying, short_page);
  frames[0] = encode_transfer("t", layout(), request())[0];  // the header claims 24 bytes a page
  EXPECT_NE(decode_error(joined(frames), layout()).find("wrong sizes"), std::string::npos)
      << decode_error(joined(frames), layout());
  // Not a KV stream at all.
  const std::vector<uint8_t> http = {'P', 'O', 'S', 'T',  ' ',  '/',  ' ',  'H', 'T', 'T', 'P', '/',
                                     '1', '.', '1', '\r', '\n', '\r', '\n', 0,   0,   0,   0,   0};
  EXPECT_NE(decode_error(http, layout()).find("bad magic"), std::string::npos);
}

Result<void> push_over_loopback(const KvLayout& sender, const KvLayout& receiver_layout, PrefilledInbox& inbox) {
  auto receiver = TcpKvReceiver::start("127.0.0.1", 0, receiver_layout, inbox);
  if (!receiver.ok()) return receiver.error();
  TcpKvTransport transport(sender, std::chrono::seconds(10));
  boost::asio::io_context io;
  Result<void> pushed = Error{"never ran"};
  // push takes its arguments by reference: they live until io.run() returns.
  const KvPeer peer{"127.0.0.1", (*receiver)->port()};
  const PrefilledRequest sent = request();
  boost::asio::co_spawn(io, transport.push(peer, "t-9", sent),
                        [&](const std::exception_ptr& failure, Result<void> result) {
                          pushed = failure ? Result<void>(Error{"threw"}) : std::move(result);
                        });
  io.run();
  return pushed;
}

TEST(KvTransfer, TcpPushLandsInTheInboxOrHearsTheRefusal) {
  PrefilledInbox inbox(std::chrono::seconds(60));
  const Result<void> pushed = push_over_loopback(layout(), layout(), inbox);
  ASSERT_TRUE(pushed.ok()) << pushed.error().message;
  std::optional<PrefilledRequest> kept = inbox.take("t-9");
  ASSERT_TRUE(kept.has_value());
  EXPECT_EQ(kept->kv, request().kv);
  EXPECT_FALSE(inbox.take("t-9").has_value());  // taken once

  KvLayout other_model = layout();
  other_model.model_identity = "another";
  const Result<void> refused = push_over_loopback(layout(), other_model, inbox);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.error().message.find("refused the KV: the KV comes from another model"), std::string::npos)
      << refused.error().message;
  EXPECT_EQ(inbox.size(), 0u);
}

TEST(KvTransfer, UnclaimedPushesExpire) {
  PrefilledInbox inbox(std::chrono::milliseconds(0));
  inbox.put("old", request());
  std::this_thread::sleep_for(std::chrono::milliseconds(2));
  EXPECT_FALSE(inbox.take("old").has_value());
}

}  // namespace
}  // namespace deepinfer::server
