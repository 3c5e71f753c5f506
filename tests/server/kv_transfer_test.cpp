// The KV push between a prefill and a decode worker: the frames (a header, one layer's KV of a
// run of blocks each, in any order, an end with the first token) round-trip a prefilled request
// byte for byte (sliding-window layers only from swa_first_block on); a truncated transfer, a
// missing or repeated piece, a corrupted byte, another model's identity, another block size or
// layer size are refused with a message saying so; over loopback TCP a push fed piece by piece
// lands in the receiver's inbox, a cancelled one does not, and the sender hears a refusal.
#include <gtest/gtest.h>

#include <boost/asio/co_spawn.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <future>
#include <thread>

#include "server/kv_transfer_wire.h"
#include "server/kv_transport.h"
#include "server/prefilled_inbox.h"

namespace deepinfer::server {
namespace {

// Two full-attention layers (16 + 8 bytes a block) and one sliding layer (8 bytes a block) whose
// 6-token window starts, for a 10-token prompt, at block 1.
KvLayout layout() {
  KvLayout l;
  l.model_identity = "model.safetensors=abc;tokenizer.json=def;";
  l.kv_dtype = DType::kBF16;
  l.block_size = 4;
  l.full_layer_bytes = {16, 8};
  l.swa_layer_bytes = {8};
  l.sliding_window = 6;
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

// One layer's blocks [first, first + count) cut out of request's handover layout.
PrefillKvPiece piece(const KvLayout& l, const PrefilledRequest& p, KvLayers kind, int32_t layer, int32_t first,
                     int32_t count) {
  const bool sliding = kind == KvLayers::kSliding;
  const std::vector<int64_t>& sizes = sliding ? l.swa_layer_bytes : l.full_layer_bytes;
  const std::vector<uint8_t>& kv = sliding ? p.swa_kv : p.kv;
  int64_t offset = 0;
  for (int32_t i = 0; i < layer; ++i) offset += sizes[static_cast<size_t>(i)];
  const int64_t block_bytes = l.bytes_per_block(kind);
  const int32_t range_first = sliding ? p.swa_first_block : 0;
  PrefillKvPiece out{kind, layer, first, count, {}};
  for (int32_t b = first; b < first + count; ++b) {
    const auto* begin = kv.data() + (b - range_first) * block_bytes + offset;
    out.bytes.insert(out.bytes.end(), begin, begin + sizes[static_cast<size_t>(layer)]);
  }
  return out;
}

// The pieces of request, not in layer or block order: full layer 0 in two runs, full layer 1
// whole, the sliding layer from its window's first block.
std::vector<PrefillKvPiece> pieces(const KvLayout& l, const PrefilledRequest& p) {
  return {piece(l, p, KvLayers::kSliding, 0, 1, 2), piece(l, p, KvLayers::kFull, 1, 0, 3),
          piece(l, p, KvLayers::kFull, 0, 2, 1), piece(l, p, KvLayers::kFull, 0, 0, 2)};
}

std::vector<std::vector<uint8_t>> encode_transfer(const std::string& transfer_id, const KvLayout& layout,
                                                  const PrefilledRequest& request) {
  std::vector<std::vector<uint8_t>> encoded{
      encode_kv_header_frame(transfer_id, layout, request.prompt_token_ids, request.params)};
  for (const PrefillKvPiece& p : pieces(layout, request)) encoded.push_back(encode_kv_piece_frame(p));
  encoded.push_back(encode_kv_end_frame(request.first_token, *request.params.seed));
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
  ASSERT_EQ(frames.size(), 1u + 4u + 1u);  // header, pieces, end
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
  const std::vector<std::vector<uint8_t>> all = encode_transfer("t", layout(), request());
  const std::vector<uint8_t> bytes = joined(all);
  const size_t end_bytes = all.back().size();
  // Cut inside the last piece's body, inside the end frame's header, and before the end frame.
  for (const size_t cut : {bytes.size() - end_bytes - 3, bytes.size() - end_bytes + 5, bytes.size() - end_bytes}) {
    const std::vector<uint8_t> truncated(bytes.begin(), bytes.begin() + static_cast<ptrdiff_t>(cut));
    EXPECT_NE(decode_error(truncated, layout()).find("truncated"), std::string::npos)
        << cut << ": " << decode_error(truncated, layout());
  }
  // An end frame with a piece missing, and a piece that comes twice.
  std::vector<std::vector<uint8_t>> frames = encode_transfer("t", layout(), request());
  frames.erase(frames.begin() + 3);  // full layer 0, block 2
  EXPECT_NE(decode_error(joined(frames), layout()).find("1 of its 8 layer blocks missing"), std::string::npos)
      << decode_error(joined(frames), layout());
  frames = encode_transfer("t", layout(), request());
  frames.insert(frames.begin() + 2, frames[1]);
  EXPECT_NE(decode_error(joined(frames), layout()).find("sliding layer 0, block 1 arrived twice"), std::string::npos)
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
  other_dtype.kv_dtype = DType::kF8E4M3;  // --kv-cache-dtype fp8 on one side only
  EXPECT_NE(decode_error(bytes, other_dtype).find("BF16 and this worker's cache is F8_E4M3"), std::string::npos)
      << decode_error(bytes, other_dtype);
  KvLayout other_layers = layout();
  other_layers.full_layer_bytes = {16, 16};
  EXPECT_NE(decode_error(bytes, other_layers).find("[16, 8] + [8] bytes per block"), std::string::npos)
      << decode_error(bytes, other_layers);
  KvLayout other_window = layout();
  other_window.sliding_window = 8;
  EXPECT_NE(decode_error(bytes, other_window).find("settings differ"), std::string::npos);
  // A piece whose size disagrees with the header's layout, and one past the prompt's blocks.
  std::vector<std::vector<uint8_t>> frames = encode_transfer("t", layout(), request());
  PrefillKvPiece short_piece = piece(layout(), request(), KvLayers::kFull, 0, 0, 2);
  short_piece.bytes.resize(20);
  frames[4] = encode_kv_piece_frame(short_piece);
  EXPECT_NE(decode_error(joined(frames), layout()).find("wrong sizes"), std::string::npos)
      << decode_error(joined(frames), layout());
  PrefillKvPiece past_end = piece(layout(), request(), KvLayers::kFull, 0, 0, 2);
  past_end.first_block = 2;
  frames[4] = encode_kv_piece_frame(past_end);
  EXPECT_NE(decode_error(joined(frames), layout()).find("outside the prompt's [0, 3)"), std::string::npos)
      << decode_error(joined(frames), layout());
  // Not a KV stream at all.
  const std::vector<uint8_t> http = {'P', 'O', 'S', 'T',  ' ',  '/',  ' ',  'H', 'T', 'T', 'P', '/',
                                     '1', '.', '1', '\r', '\n', '\r', '\n', 0,   0,   0,   0,   0};
  EXPECT_NE(decode_error(http, layout()).find("bad magic"), std::string::npos);
}

// Opens a push from a sender of layout `sender` to a receiver of receiver_layout and feeds it the
// request's pieces from this thread while the push runs on another (as an engine and a server
// do), then finishes it; or cancels it after its first piece went out, and finishes it after that.
Result<void> push_over_loopback(const KvLayout& sender, const KvLayout& receiver_layout, PrefilledInbox& inbox,
                                bool cancel = false) {
  auto receiver = TcpKvReceiver::start("127.0.0.1", 0, receiver_layout, inbox);
  if (!receiver.ok()) return receiver.error();
  TcpKvTransport transport(sender, std::chrono::seconds(10));
  boost::asio::io_context io;
  auto work = boost::asio::make_work_guard(io);
  std::thread server([&] { io.run(); });
  const KvPeer peer{"127.0.0.1", (*receiver)->port()};
  const PrefilledRequest sent = request();
  const std::shared_ptr<KvPush> push =
      transport.open(io.get_executor(), peer, "t-9", sent.prompt_token_ids, sent.params);
  std::promise<Result<void>> pushed;
  for (PrefillKvPiece& p : pieces(sender, sent)) {
    push->put(std::move(p));
    if (cancel) break;
  }
  if (cancel) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));  // it connected and sent the piece
    push->cancel();
  }
  boost::asio::co_spawn(
      io, [&]() { return push->finish(sent.first_token, *sent.params.seed); },
      [&](const std::exception_ptr& failure, Result<void> result) {
        pushed.set_value(failure ? Result<void>(Error{"threw"}) : std::move(result));
      });
  Result<void> result = pushed.get_future().get();
  work.reset();
  server.join();
  std::this_thread::sleep_for(std::chrono::milliseconds(50));  // the receiver's thread sees the end
  return result;
}

TEST(KvTransfer, TcpPushLandsInTheInboxOrHearsTheRefusal) {
  PrefilledInbox inbox(std::chrono::seconds(60));
  const Result<void> pushed = push_over_loopback(layout(), layout(), inbox);
  ASSERT_TRUE(pushed.ok()) << pushed.error().message;
  std::optional<PrefilledRequest> kept = inbox.take("t-9");
  ASSERT_TRUE(kept.has_value());
  EXPECT_EQ(kept->kv, request().kv);
  EXPECT_EQ(kept->swa_kv, request().swa_kv);
  EXPECT_EQ(kept->first_token, 11);
  EXPECT_EQ(kept->params.seed, std::optional<uint64_t>(42));
  EXPECT_FALSE(inbox.take("t-9").has_value());  // taken once

  KvLayout other_model = layout();
  other_model.model_identity = "another";
  const Result<void> refused = push_over_loopback(layout(), other_model, inbox);
  ASSERT_FALSE(refused.ok());
  EXPECT_NE(refused.error().message.find("refused the KV: the KV comes from another model"), std::string::npos)
      << refused.error().message;
  EXPECT_EQ(inbox.size(), 0u);
}

TEST(KvTransfer, CancelledPushLeavesNothingInTheInbox) {
  PrefilledInbox inbox(std::chrono::seconds(60));
  const Result<void> finished = push_over_loopback(layout(), layout(), inbox, /*cancel=*/true);
  ASSERT_FALSE(finished.ok());
  EXPECT_NE(finished.error().message.find("the push was cancelled"), std::string::npos) << finished.error().message;
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
