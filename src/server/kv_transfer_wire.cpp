// The KV push's frames: encoding, and checking and assembling what a decode worker received.
#include "server/kv_transfer_wire.h"

#include <xxhash.h>

#include <algorithm>
#include <cstring>
#include <nlohmann/json.hpp>

#include "engine/kv_handover.h"
#include "kvcache/block_pool.h"
#include "server/token_api.h"

namespace deepinfer::server {
namespace {

using Json = nlohmann::json;

constexpr uint32_t kMagic = 0x564B4944;  // "DIKV" little-endian
constexpr uint16_t kVersion = 2;
constexpr size_t kPiecePrefixBytes = 12;  // [layers u8][zero u8][layer u16][first block u32][blocks u32]
// The end frame's body is a small JSON object.
constexpr uint64_t kMaxEndBodyBytes = 4096;

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

int64_t sum(const std::vector<int64_t>& values) {
  int64_t total = 0;
  for (int64_t v : values) total += v;
  return total;
}

std::string join(const std::vector<int64_t>& values) {
  std::string text;
  for (int64_t v : values) text += (text.empty() ? "" : ", ") + std::to_string(v);
  return "[" + text + "]";
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

KvLayout KvLayout::of(const CausalLM& model, std::string model_identity, int32_t block_size) {
  KvLayout layout;
  layout.model_identity = std::move(model_identity);
  layout.kv_dtype = model.kv_cache_dtype();
  layout.block_size = block_size;
  for (const CausalLM::HandoverLayer& layer : model.handover_layers()) {
    (layer.layers == KvLayers::kSliding ? layout.swa_layer_bytes : layout.full_layer_bytes)
        .push_back(layer.bytes_per_block);
  }
  layout.sliding_window = max_sliding_window(model.config());
  return layout;
}

int64_t KvLayout::bytes_per_block(KvLayers layers) const {
  return sum(layers == KvLayers::kSliding ? swa_layer_bytes : full_layer_bytes);
}

int32_t KvLayout::swa_first_block(int32_t num_tokens) const {
  return swa_window_start(sliding_window, num_tokens, block_size) / block_size;
}

std::vector<uint8_t> encode_kv_header_frame(const std::string& transfer_id, const KvLayout& layout,
                                            std::span<const int32_t> prompt_token_ids, const SamplingParams& params) {
  const Json header{{"transfer_id", transfer_id},
                    {"model_identity", layout.model_identity},
                    {"kv_dtype", std::string(dtype_name(layout.kv_dtype))},
                    {"block_size", layout.block_size},
                    {"full_layer_bytes", layout.full_layer_bytes},
                    {"swa_layer_bytes", layout.swa_layer_bytes},
                    {"sliding_window", layout.sliding_window},
                    {"prompt_token_ids", std::vector<int32_t>(prompt_token_ids.begin(), prompt_token_ids.end())},
                    {"sampling", sampling_params_to_json(params)}};
  return encode_kv_frame(KvFrameType::kHeader, as_bytes(header.dump()));
}

std::vector<uint8_t> encode_kv_piece_frame(const PrefillKvPiece& piece) {
  std::vector<uint8_t> body;
  body.reserve(kPiecePrefixBytes + piece.bytes.size());
  put<uint8_t>(body, piece.layers == KvLayers::kSliding ? 1 : 0);
  put<uint8_t>(body, 0);
  put<uint16_t>(body, static_cast<uint16_t>(piece.layer));
  put<uint32_t>(body, static_cast<uint32_t>(piece.first_block));
  put<uint32_t>(body, static_cast<uint32_t>(piece.num_blocks));
  body.insert(body.end(), piece.bytes.begin(), piece.bytes.end());
  return encode_kv_frame(KvFrameType::kLayerPages, body);
}

std::vector<uint8_t> encode_kv_end_frame(int32_t first_token, uint64_t seed) {
  const Json end{{"first_token", first_token}, {"seed", seed}};
  return encode_kv_frame(KvFrameType::kEnd, as_bytes(end.dump()));
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
  int64_t widest = 0;
  for (int64_t bytes : expected_.full_layer_bytes) widest = std::max(widest, bytes);
  for (int64_t bytes : expected_.swa_layer_bytes) widest = std::max(widest, bytes);
  return std::max(kMaxEndBodyBytes,
                  kPiecePrefixBytes + static_cast<uint64_t>(num_blocks_) * static_cast<uint64_t>(widest));
}

Result<void> PrefilledKvAssembler::accept(const KvFrameHeader& header, std::span<const uint8_t> body) {
  if (done_) return Error{"a KV frame after the transfer's end frame"};
  switch (header.type) {
    case KvFrameType::kHeader:
      if (has_header_) return Error{"a second KV header frame in one transfer"};
      return accept_header(body);
    case KvFrameType::kLayerPages:
      if (!has_header_) return Error{"a KV frame of layer pages before the header frame"};
      return accept_piece(body);
    case KvFrameType::kEnd:
      if (!has_header_) return Error{"a KV end frame before the header frame"};
      return accept_end(body);
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
    const auto full_bytes = json.at("full_layer_bytes").get<std::vector<int64_t>>();
    const auto swa_bytes = json.at("swa_layer_bytes").get<std::vector<int64_t>>();
    const auto window = json.at("sliding_window").get<int32_t>();
    if (full_bytes != expected_.full_layer_bytes || swa_bytes != expected_.swa_layer_bytes ||
        window != expected_.sliding_window) {
      return Error{"the KV's layers hold " + join(full_bytes) + " + " + join(swa_bytes) +
                   " bytes per block (full + sliding layers, window " + std::to_string(window) +
                   ") and this worker's cache " + join(expected_.full_layer_bytes) + " + " +
                   join(expected_.swa_layer_bytes) + " (window " + std::to_string(expected_.sliding_window) +
                   "): the model or its settings differ"};
    }
    request_.prompt_token_ids = json.at("prompt_token_ids").get<std::vector<int32_t>>();
    Result<SamplingParams> params = sampling_params_from_wire(json.at("sampling"));
    if (!params.ok()) return params.error();
    request_.params = std::move(*params);
  } catch (const nlohmann::json::exception& e) {
    return Error{std::string("bad KV header frame: ") + e.what()};
  }
  request_.block_size = expected_.block_size;
  if (request_.prompt_token_ids.empty()) return Error{"the KV header frame has an empty prompt"};
  const auto num_tokens = static_cast<int32_t>(request_.prompt_token_ids.size());
  num_blocks_ = blocks_for_tokens(num_tokens, expected_.block_size);
  request_.swa_first_block = expected_.swa_first_block(num_tokens);
  const int32_t num_swa_blocks = num_blocks_ - request_.swa_first_block;
  request_.kv.resize(static_cast<size_t>(num_blocks_) *
                     static_cast<size_t>(expected_.bytes_per_block(KvLayers::kFull)));
  request_.swa_kv.resize(static_cast<size_t>(num_swa_blocks) *
                         static_cast<size_t>(expected_.bytes_per_block(KvLayers::kSliding)));
  full_received_.assign(expected_.full_layer_bytes.size(), std::vector<bool>(static_cast<size_t>(num_blocks_)));
  swa_received_.assign(expected_.swa_layer_bytes.size(), std::vector<bool>(static_cast<size_t>(num_swa_blocks)));
  has_header_ = true;
  return {};
}

Result<void> PrefilledKvAssembler::accept_piece(std::span<const uint8_t> body) {
  if (body.size() < kPiecePrefixBytes) return Error{"a KV frame of layer pages without its place (truncated)"};
  const uint8_t kind = body[0];
  if (kind > 1) return Error{"a KV frame of unknown layers " + std::to_string(kind)};
  const bool sliding = kind == 1;
  const auto layer = static_cast<size_t>(get<uint16_t>(body, 2));
  const auto first = static_cast<int64_t>(get<uint32_t>(body, 4));
  const auto count = static_cast<int64_t>(get<uint32_t>(body, 8));
  const std::span<const uint8_t> bytes = body.subspan(kPiecePrefixBytes);
  const std::vector<int64_t>& layer_bytes = sliding ? expected_.swa_layer_bytes : expected_.full_layer_bytes;
  const char* name = sliding ? "sliding" : "full";
  if (layer >= layer_bytes.size()) {
    return Error{std::string("KV of ") + name + " layer " + std::to_string(layer) + " where the model has " +
                 std::to_string(layer_bytes.size()) + " (wrong sizes)"};
  }
  const int64_t range_first = sliding ? request_.swa_first_block : 0;
  if (count < 1 || first < range_first || first + count > num_blocks_) {
    return Error{std::string("KV of ") + name + " layer " + std::to_string(layer) + " for blocks " +
                 std::to_string(first) + " + " + std::to_string(count) + ", outside the prompt's [" +
                 std::to_string(range_first) + ", " + std::to_string(num_blocks_) + ") (wrong sizes)"};
  }
  const int64_t per_block = layer_bytes[layer];
  if (static_cast<int64_t>(bytes.size()) != count * per_block) {
    return Error{"KV of " + std::to_string(count) + " blocks in " + std::to_string(bytes.size()) +
                 " bytes where this worker's cache holds " + std::to_string(per_block) + " per block (wrong sizes)"};
  }
  std::vector<bool>& received = (sliding ? swa_received_ : full_received_)[layer];
  int64_t offset_in_block = 0;
  for (size_t l = 0; l < layer; ++l) offset_in_block += layer_bytes[l];
  const int64_t block_bytes = sum(layer_bytes);
  std::vector<uint8_t>& into = sliding ? request_.swa_kv : request_.kv;
  for (int64_t b = 0; b < count; ++b) {
    const auto slot = static_cast<size_t>(first + b - range_first);
    if (received[slot]) {
      return Error{std::string("KV of ") + name + " layer " + std::to_string(layer) + ", block " +
                   std::to_string(first + b) + " arrived twice"};
    }
    received[slot] = true;
    std::memcpy(into.data() + static_cast<int64_t>(slot) * block_bytes + offset_in_block, bytes.data() + b * per_block,
                static_cast<size_t>(per_block));
  }
  return {};
}

Result<void> PrefilledKvAssembler::accept_end(std::span<const uint8_t> body) {
  size_t missing = 0;
  size_t total = 0;
  for (const auto* kind : {&full_received_, &swa_received_}) {
    for (const std::vector<bool>& layer : *kind) {
      missing += static_cast<size_t>(std::count(layer.begin(), layer.end(), false));
      total += layer.size();
    }
  }
  if (missing > 0) {
    return Error{"the KV transfer ended with " + std::to_string(missing) + " of its " + std::to_string(total) +
                 " layer blocks missing (truncated)"};
  }
  const Json json = Json::parse(body.begin(), body.end(), nullptr, false);
  if (!json.is_object()) return Error{"the KV end frame is not a JSON object"};
  try {
    request_.first_token = json.at("first_token").get<int32_t>();
    request_.params.seed = json.at("seed").get<uint64_t>();
  } catch (const nlohmann::json::exception& e) {
    return Error{std::string("bad KV end frame: ") + e.what()};
  }
  done_ = true;
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
