// The KV push's frames: encoding, and checking and assembling what a decode worker received.
#include "server/kv_transfer_wire.h"

#include <xxhash.h>

#include <algorithm>
#include <cstring>
#include <nlohmann/json.hpp>

#include "kvcache/block_pool.h"
#include "server/token_api.h"

namespace deepinfer::server {
namespace {

using Json = nlohmann::json;

constexpr uint32_t kMagic = 0x564B4944;  // "DIKV" little-endian
constexpr uint16_t kVersion = 1;
constexpr size_t kPagePrefixBytes = 8;  // [layers u8][3 zero bytes][block index u32]

template <typename T>
void put(std::vector<uint8_t>& out, T value) {
  const auto* bytes = reinterpret_cast<const uint8_t*>(&value);
  out.insert(out.end(), bytes, bytes + sizeof(T));
}

template <typename T>
T get(std::span<const uint8_t> bytes, size_t offset) {
  T value;
  std::memcpy(&value, bytes.data() + offset, sizeof(T));
  return value;
}

std::span<const uint8_t> as_bytes(const std::string& text) {
  return {reinterpret_cast<const uint8_t*>(text.data()), text.size()};
}

std::vector<uint8_t> page_frame(uint8_t layers, int32_t block_index, std::span<const uint8_t> block) {
  std::vector<uint8_t> body;
  body.reserve(kPagePrefixBytes + block.size());
  put<uint8_t>(body, layers);
  put<uint8_t>(body, 0);
  put<uint16_t>(body, 0);
  put<uint32_t>(body, static_cast<uint32_t>(block_index));
  body.insert(body.end(), block.begin(), block.end());
  return encode_kv_frame(KvFrameType::kPage, body);
}

}  // namespace

std::vector<uint8_t> encode_kv_frame(KvFrameType type, std::span<const uint8_t> body) {
  std::vector<uint8_t> frame;
  frame.reserve(kKvFrameHeaderBytes + body.size());
  put<uint32_t>(frame, kMagic);
  put<uint16_t>(frame, kVersion);
  put<uint16_t>(frame, static_cast<uint16_t>(type));
  put<uint64_t>(frame, body.size());
  put<uint64_t>(frame, XXH3_64bits(body.data(), body.size()));
  frame.insert(frame.end(), body.begin(), body.end());
  return frame;
}

PrefilledKvFrames::PrefilledKvFrames(std::string transfer_id, const KvLayout& layout, const PrefilledRequest& request)
    : transfer_id_(std::move(transfer_id)), layout_(layout), request_(request) {
  num_full_blocks_ =
      static_cast<size_t>(blocks_for_tokens(static_cast<int64_t>(request.prompt_token_ids.size()), layout.block_size));
  num_full_pages_ = layout.full_bytes_per_block > 0 ? num_full_blocks_ : 0;
  num_swa_pages_ = layout.swa_bytes_per_block > 0 ? num_full_blocks_ - static_cast<size_t>(request.swa_first_block) : 0;
}

std::vector<uint8_t> PrefilledKvFrames::frame(size_t index) const {
  if (index == 0) {
    const Json header{{"transfer_id", transfer_id_},
                      {"model_identity", layout_.model_identity},
                      {"kv_dtype", std::string(dtype_name(layout_.kv_dtype))},
                      {"block_size", layout_.block_size},
                      {"full_bytes_per_block", layout_.full_bytes_per_block},
                      {"swa_bytes_per_block", layout_.swa_bytes_per_block},
                      {"prompt_token_ids", request_.prompt_token_ids},
                      {"sampling", sampling_params_to_json(request_.params)},
                      {"first_token", request_.first_token},
                      {"swa_first_block", request_.swa_first_block},
                      {"num_full_blocks", num_full_blocks_},
                      {"num_swa_blocks", num_swa_pages_}};
    return encode_kv_frame(KvFrameType::kHeader, as_bytes(header.dump()));
  }
  size_t page = index - 1;
  if (page < num_full_pages_) {
    const auto bytes = static_cast<size_t>(layout_.full_bytes_per_block);
    return page_frame(0, static_cast<int32_t>(page), std::span(request_.kv).subspan(page * bytes, bytes));
  }
  page -= num_full_pages_;
  if (page < num_swa_pages_) {
    const auto bytes = static_cast<size_t>(layout_.swa_bytes_per_block);
    return page_frame(1, request_.swa_first_block + static_cast<int32_t>(page),
                      std::span(request_.swa_kv).subspan(page * bytes, bytes));
  }
  return encode_kv_frame(KvFrameType::kEnd, {});
}

std::vector<uint8_t> encode_kv_reply(const std::optional<std::string>& error) {
  const Json reply = error ? Json{{"error", *error}} : Json{{"ok", true}};
  return encode_kv_frame(KvFrameType::kReply, as_bytes(reply.dump()));
}

Result<KvFrameHeader> parse_kv_frame_header(std::span<const uint8_t> bytes, uint64_t max_body_bytes) {
  if (bytes.size() < kKvFrameHeaderBytes) {
    return Error{"truncated KV frame: " + std::to_string(bytes.size()) + " of its " +
                 std::to_string(kKvFrameHeaderBytes) + " header bytes arrived"};
  }
  if (get<uint32_t>(bytes, 0) != kMagic)
    return Error{"not a KV transfer frame (bad magic): is the peer a deepinfer worker's KV port?"};
  if (const auto version = get<uint16_t>(bytes, 4); version != kVersion) {
    return Error{"KV frame version " + std::to_string(version) + ", this worker speaks " + std::to_string(kVersion) +
                 ": run the same deepinfer release on prefill and decode workers"};
  }
  const auto type = get<uint16_t>(bytes, 6);
  if (type < static_cast<uint16_t>(KvFrameType::kHeader) || type > static_cast<uint16_t>(KvFrameType::kReply)) {
    return Error{"unknown KV frame type " + std::to_string(type)};
  }
  KvFrameHeader header;
  header.type = static_cast<KvFrameType>(type);
  header.body_bytes = get<uint64_t>(bytes, 8);
  header.body_checksum = get<uint64_t>(bytes, 16);
  if (header.body_bytes > max_body_bytes) {
    return Error{"KV frame of " + std::to_string(header.body_bytes) + " bytes where at most " +
                 std::to_string(max_body_bytes) + " fit (wrong sizes for this model's KV)"};
  }
  return header;
}

Result<void> check_kv_frame_body(const KvFrameHeader& header, std::span<const uint8_t> body) {
  if (body.size() != header.body_bytes) {
    return Error{"truncated KV frame: " + std::to_string(body.size()) + " of its " + std::to_string(header.body_bytes) +
                 " body bytes arrived"};
  }
  if (XXH3_64bits(body.data(), body.size()) != header.body_checksum) {
    return Error{"a KV frame's checksum does not match its body (corrupted in transit)"};
  }
  return {};
}

Result<void> parse_kv_reply(std::span<const uint8_t> body) {
  const Json reply = Json::parse(body.begin(), body.end(), nullptr, false);
  if (!reply.is_object()) return Error{"the decode worker's reply is not JSON"};
  if (auto it = reply.find("error"); it != reply.end() && it->is_string()) return Error{it->get<std::string>()};
  if (reply.value("ok", false)) return {};
  return Error{"the decode worker's reply says neither ok nor error"};
}

uint64_t PrefilledKvAssembler::max_next_body_bytes() const {
  if (!has_header_) return kMaxKvJsonBodyBytes;
  return kPagePrefixBytes +
         static_cast<uint64_t>(std::max(expected_.full_bytes_per_block, expected_.swa_bytes_per_block));
}

Result<void> PrefilledKvAssembler::accept(const KvFrameHeader& header, std::span<const uint8_t> body) {
  if (done_) return Error{"a KV frame after the transfer's end frame"};
  switch (header.type) {
    case KvFrameType::kHeader:
      if (has_header_) return Error{"a second KV header frame in one transfer"};
      return accept_header(body);
    case KvFrameType::kPage:
      if (!has_header_) return Error{"a KV page frame before the header frame"};
      return accept_page(body);
    case KvFrameType::kEnd: {
      if (!has_header_) return Error{"a KV end frame before the header frame"};
      const auto missing = std::count(received_.begin(), received_.end(), false);
      if (missing > 0) {
        return Error{"the KV transfer ended with " + std::to_string(missing) + " of its " +
                     std::to_string(received_.size()) + " pages missing (truncated)"};
      }
      done_ = true;
      return {};
    }
    case KvFrameType::kReply:
      break;
  }
  return Error{"a reply frame inside a KV transfer"};
}

Result<void> PrefilledKvAssembler::accept_header(std::span<const uint8_t> body) {
  const Json json = Json::parse(body.begin(), body.end(), nullptr, false);
  if (!json.is_object()) return Error{"the KV header frame is not a JSON object"};
  try {
    transfer_id_ = json.at("transfer_id").get<std::string>();
    const auto identity = json.at("model_identity").get<std::string>();
    if (identity != expected_.model_identity) {
      return Error{
          "the KV comes from another model (its identity differs from this worker's): prefill and decode "
          "workers must serve the same model directory"};
    }
    const auto dtype = json.at("kv_dtype").get<std::string>();
    if (dtype != dtype_name(expected_.kv_dtype)) {
      return Error{"the KV is " + dtype + " and this worker's cache is " + std::string(dtype_name(expected_.kv_dtype)) +
                   ": run both workers on the same --device"};
    }
    const auto block_size = json.at("block_size").get<int32_t>();
    if (block_size != expected_.block_size) {
      return Error{"the KV comes in " + std::to_string(block_size) + "-token blocks and this worker uses " +
                   std::to_string(expected_.block_size) + ": run both workers with the same --block-size"};
    }
    const auto full_bytes = json.at("full_bytes_per_block").get<int64_t>();
    const auto swa_bytes = json.at("swa_bytes_per_block").get<int64_t>();
    if (full_bytes != expected_.full_bytes_per_block || swa_bytes != expected_.swa_bytes_per_block) {
      return Error{"the KV has " + std::to_string(full_bytes) + " + " + std::to_string(swa_bytes) +
                   " bytes per block (full + sliding layers) and this worker's cache " +
                   std::to_string(expected_.full_bytes_per_block) + " + " +
                   std::to_string(expected_.swa_bytes_per_block) + ": the model or its settings differ"};
    }
    request_.prompt_token_ids = json.at("prompt_token_ids").get<std::vector<int32_t>>();
    Result<SamplingParams> params = sampling_params_from_wire(json.at("sampling"));
    if (!params.ok()) return params.error();
    request_.params = std::move(*params);
    request_.first_token = json.at("first_token").get<int32_t>();
    request_.swa_first_block = json.at("swa_first_block").get<int32_t>();
    num_full_blocks_ = json.at("num_full_blocks").get<int32_t>();
    num_swa_blocks_ = json.at("num_swa_blocks").get<int32_t>();
  } catch (const nlohmann::json::exception& e) {
    return Error{std::string("bad KV header frame: ") + e.what()};
  }
  request_.block_size = expected_.block_size;
  if (request_.prompt_token_ids.empty()) return Error{"the KV header frame has an empty prompt"};
  const int32_t want_blocks =
      blocks_for_tokens(static_cast<int64_t>(request_.prompt_token_ids.size()), expected_.block_size);
  const int32_t want_swa = expected_.swa_bytes_per_block > 0 ? want_blocks - request_.swa_first_block : 0;
  if (num_full_blocks_ != want_blocks || request_.swa_first_block < 0 || num_swa_blocks_ != want_swa) {
    return Error{"the KV header frame announces " + std::to_string(num_full_blocks_) + " + " +
                 std::to_string(num_swa_blocks_) + " pages for a " + std::to_string(request_.prompt_token_ids.size()) +
                 "-token prompt (wrong sizes)"};
  }
  request_.kv.resize(static_cast<size_t>(num_full_blocks_) * static_cast<size_t>(expected_.full_bytes_per_block));
  request_.swa_kv.resize(static_cast<size_t>(num_swa_blocks_) * static_cast<size_t>(expected_.swa_bytes_per_block));
  const int32_t full_pages = expected_.full_bytes_per_block > 0 ? num_full_blocks_ : 0;
  received_.assign(static_cast<size_t>(full_pages + num_swa_blocks_), false);
  has_header_ = true;
  return {};
}

Result<void> PrefilledKvAssembler::accept_page(std::span<const uint8_t> body) {
  if (body.size() < kPagePrefixBytes) return Error{"a KV page frame without its page index (truncated)"};
  const uint8_t layers = body[0];
  const auto block = static_cast<int64_t>(get<uint32_t>(body, 4));
  const std::span<const uint8_t> bytes = body.subspan(kPagePrefixBytes);
  if (layers > 1) return Error{"a KV page of unknown layers " + std::to_string(layers)};
  const bool sliding = layers == 1;
  const int64_t page_bytes = sliding ? expected_.swa_bytes_per_block : expected_.full_bytes_per_block;
  const int64_t first = sliding ? request_.swa_first_block : 0;
  const int64_t count = sliding ? num_swa_blocks_ : num_full_blocks_;
  if (page_bytes == 0 || block < first || block >= first + count) {
    return Error{std::string("a KV page of the ") + (sliding ? "sliding" : "full") + " layers for block " +
                 std::to_string(block) + ", outside what the header announced (wrong sizes)"};
  }
  if (static_cast<int64_t>(bytes.size()) != page_bytes) {
    return Error{"a KV page of " + std::to_string(bytes.size()) + " bytes where this worker's cache holds " +
                 std::to_string(page_bytes) + " per block (wrong sizes)"};
  }
  const int64_t full_pages = expected_.full_bytes_per_block > 0 ? num_full_blocks_ : 0;
  const auto slot = static_cast<size_t>((sliding ? full_pages : 0) + block - first);
  if (received_[slot]) return Error{"KV page " + std::to_string(block) + " arrived twice"};
  received_[slot] = true;
  std::vector<uint8_t>& into = sliding ? request_.swa_kv : request_.kv;
  std::memcpy(into.data() + static_cast<size_t>(block - first) * static_cast<size_t>(page_bytes), bytes.data(),
              bytes.size());
  return {};
}

Result<PrefilledRequest> decode_prefilled_transfer(std::span<const uint8_t> bytes, const KvLayout& expected,
                                                   std::string* transfer_id) {
  PrefilledKvAssembler assembler(expected);
  size_t offset = 0;
  while (!assembler.done()) {
    if (offset == bytes.size()) return Error{"the KV transfer ended before its end frame (truncated)"};
    Result<KvFrameHeader> header = parse_kv_frame_header(bytes.subspan(offset), assembler.max_next_body_bytes());
    if (!header.ok()) return header.error();
    offset += kKvFrameHeaderBytes;
    const size_t available = std::min<size_t>(bytes.size() - offset, header->body_bytes);
    const std::span<const uint8_t> body = bytes.subspan(offset, available);
    DI_TRY(check_kv_frame_body(*header, body));
    DI_TRY(assembler.accept(*header, body));
    offset += available;
  }
  if (transfer_id != nullptr) *transfer_id = assembler.transfer_id();
  return assembler.take();
}

}  // namespace deepinfer::server
