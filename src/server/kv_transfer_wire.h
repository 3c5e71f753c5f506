// The wire format of a prefilled request's KV pushed from a prefill worker to a decode worker
// (docs/cluster.md, "The KV push"): a header frame (JSON: the transfer id, the model identity,
// the KV layout, the request), one frame per KV page in the cache's own element type, an end
// frame; the receiver answers with one reply frame. Every frame carries its body's XXH3-64, so
// the receiver checks what it received before a byte of it reaches its cache. Pure functions, no
// sockets (kv_transport.h moves the bytes).
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/result.h"
#include "engine/engine_core.h"

namespace deepinfer::server {

// What both ends must agree on for one's KV to be valid in the other's cache.
struct KvLayout {
  std::string model_identity;  // fingerprint_model_dir: weights and tokenizer
  DType kv_dtype = DType::kF32;
  int32_t block_size = 0;
  int64_t full_bytes_per_block = 0;  // CausalLM::handover_kv_bytes_per_block(KvLayers::kFull)
  int64_t swa_bytes_per_block = 0;   // ... (KvLayers::kSliding)
};

enum class KvFrameType : uint16_t { kHeader = 1, kPage = 2, kEnd = 3, kReply = 4 };

// [magic 'DIKV' u32][version u16][type u16][body bytes u64][body XXH3-64 u64], little-endian.
struct KvFrameHeader {
  KvFrameType type = KvFrameType::kHeader;
  uint64_t body_bytes = 0;
  uint64_t body_checksum = 0;
};
inline constexpr size_t kKvFrameHeaderBytes = 24;
// The largest header or reply body a receiver reads (a prompt's token ids and sampling).
inline constexpr uint64_t kMaxKvJsonBodyBytes = uint64_t{64} << 20;

std::vector<uint8_t> encode_kv_frame(KvFrameType type, std::span<const uint8_t> body);
// The frames of one transfer, in order: header, pages (the full layers' blocks, then the sliding
// layers' from swa_first_block on), end; each encoded when asked for, so a sender holds one
// page's copy at a time, not the prompt's. A page frame's body: [layers u8 (0 full, 1 sliding)]
// [3 zero bytes][block index u32][the block's bytes]. layout and request must outlive it.
class PrefilledKvFrames {
 public:
  PrefilledKvFrames(std::string transfer_id, const KvLayout& layout, const PrefilledRequest& request);
  size_t size() const { return 1 + num_full_pages_ + num_swa_pages_ + 1; }
  std::vector<uint8_t> frame(size_t index) const;

 private:
  std::string transfer_id_;
  const KvLayout& layout_;
  const PrefilledRequest& request_;
  size_t num_full_blocks_ = 0;
  size_t num_full_pages_ = 0;  // num_full_blocks_, or 0 when the full layers hold no bytes
  size_t num_swa_pages_ = 0;
};
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
// size, the bytes per block, every page once and of its size. Errors name what differs.
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
  Result<void> accept_page(std::span<const uint8_t> body);

  KvLayout expected_;
  bool has_header_ = false;
  bool done_ = false;
  std::string transfer_id_;
  PrefilledRequest request_;
  int32_t num_full_blocks_ = 0;
  int32_t num_swa_blocks_ = 0;
  std::vector<bool> received_;  // full blocks, then sliding blocks
};

// Decodes a whole transfer held in memory (tests; the TCP receiver reads frame by frame): a
// stream that ends mid-frame or before the end frame is an error saying it was truncated.
Result<PrefilledRequest> decode_prefilled_transfer(std::span<const uint8_t> bytes, const KvLayout& expected,
                                                   std::string* transfer_id);

}  // namespace deepinfer::server
