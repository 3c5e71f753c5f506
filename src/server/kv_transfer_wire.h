// The wire format of a prefilled request's KV pushed from a prefill worker to a decode worker
// (docs/cluster.md, "The KV push"): a header frame (JSON: the transfer id, the model identity,
// the KV layout, the prompt and sampling), frames of one layer's KV of consecutive blocks in the
// cache's own element type, sent while the prefill runs (engine/prefill_kv_export.h), and an end
// frame with the first token and its seed; the receiver answers with one reply frame. Every frame
// carries its body's XXH3-64, so the receiver checks what it received before a byte of it reaches
// its cache. Pure functions, no sockets (kv_transport.h moves the bytes).
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/result.h"
#include "engine/engine_core.h"
#include "engine/prefill_kv_export.h"

namespace deepinfer::server {

// What both ends must agree on for one's KV to be valid in the other's cache.
struct KvLayout {
  std::string model_identity;  // fingerprint_model_dir: weights and tokenizer
  DType kv_dtype = DType::kF32;
  int32_t block_size = 0;
  // Each handover layer's bytes per block (CausalLM::handover_layers), the full-attention layers'
  // and the sliding-window layers' apart, in layer order.
  std::vector<int64_t> full_layer_bytes;
  std::vector<int64_t> swa_layer_bytes;
  int32_t sliding_window = 0;  // the widest window (max_sliding_window); 0: none

  // The model's layout for one identity and block size.
  static KvLayout of(const CausalLM& model, std::string model_identity, int32_t block_size);
  // Bytes one block of those layers holds (CausalLM::handover_kv_bytes_per_block).
  int64_t bytes_per_block(KvLayers layers) const;
  // The first block of a num_tokens prompt the sliding layers send (engine/kv_handover.h).
  int32_t swa_first_block(int32_t num_tokens) const;
};

enum class KvFrameType : uint16_t { kHeader = 1, kLayerPages = 2, kEnd = 3, kReply = 4 };

// [magic 'DIKV' u32][version u16][type u16][body bytes u64][body XXH3-64 u64], little-endian.
struct KvFrameHeader {
  KvFrameType type = KvFrameType::kHeader;
  uint64_t body_bytes = 0;
  uint64_t body_checksum = 0;
};
inline constexpr size_t kKvFrameHeaderBytes = 24;
// The largest header, end or reply body a receiver reads (a prompt's token ids and sampling).
inline constexpr uint64_t kMaxKvJsonBodyBytes = uint64_t{64} << 20;

std::vector<uint8_t> encode_kv_frame(KvFrameType type, std::span<const uint8_t> body);
// The frames of one transfer, in this order: the header; the pieces, any order, each layer's each
// block once (the full layers' every prompt block, the sliding layers' from
// layout.swa_first_block on); the end.
std::vector<uint8_t> encode_kv_header_frame(const std::string& transfer_id, const KvLayout& layout,
                                            std::span<const int32_t> prompt_token_ids, const SamplingParams& params);
// A piece's body: [layers u8 (0 full, 1 sliding)][zero u8][layer u16][first block u32][blocks u32]
// [the bytes].
std::vector<uint8_t> encode_kv_piece_frame(const PrefillKvPiece& piece);
std::vector<uint8_t> encode_kv_end_frame(int32_t first_token, uint64_t seed);
// The reply: nullopt accepted, else why not.
std::vector<uint8_t> encode_kv_reply(const std::optional<std::string>& error);

// Checks the magic, version and type, and that the body is within max_body_bytes.
Result<KvFrameHeader> parse_kv_frame_header(std::span<const uint8_t> bytes, uint64_t max_body_bytes);
// The body's checksum against the header's.
Result<void> check_kv_frame_body(const KvFrameHeader& header, std::span<const uint8_t> body);
// A reply frame's body: ok, or the receiver's error.
Result<void> parse_kv_reply(std::span<const uint8_t> body);

// Assembles one transfer from its frames (checked already with check_kv_frame_body) and
// verifies it against the receiver's own layout: the model identity, the element type, the block
// size, each layer's bytes per block, every layer's every block once and of its size. Errors name
// what differs. The result is a PrefilledRequest whose kv and swa_kv hold the blocks as
// read_prefilled_kv lays them out.
class PrefilledKvAssembler {
 public:
  explicit PrefilledKvAssembler(KvLayout expected) : expected_(std::move(expected)) {}
  // The largest body the next frame may have.
  uint64_t max_next_body_bytes() const;
  Result<void> accept(const KvFrameHeader& header, std::span<const uint8_t> body);
  bool done() const { return done_; }
  const std::string& transfer_id() const { return transfer_id_; }
  // After done(): the request, its KV in place.
  PrefilledRequest take() { return std::move(request_); }

 private:
  Result<void> accept_header(std::span<const uint8_t> body);
  Result<void> accept_piece(std::span<const uint8_t> body);
  Result<void> accept_end(std::span<const uint8_t> body);

  KvLayout expected_;
  bool has_header_ = false;
  bool done_ = false;
  std::string transfer_id_;
  PrefilledRequest request_;
  int32_t num_blocks_ = 0;
  // Per kind, per layer, per block of that kind's range: arrived.
  std::vector<std::vector<bool>> full_received_;
  std::vector<std::vector<bool>> swa_received_;
};

// Decodes a whole transfer held in memory (tests; the TCP receiver reads frame by frame): a
// stream that ends mid-frame or before the end frame is an error saying it was truncated.
Result<PrefilledRequest> decode_prefilled_transfer(std::span<const uint8_t> bytes, const KvLayout& expected,
                                                   std::string* transfer_id);

}  // namespace deepinfer::server
