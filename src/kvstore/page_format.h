// The stored image of one KV page: a fixed header (identity, layout, checksums), the page's
// token ids, then the KV payload. The same image lives in every tier, so a page read from any
// of them is verified the same way before its bytes reach the model.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/dtype.h"
#include "core/result.h"
#include "kvcache/prefix_hash.h"

namespace deepinfer {

// 2: the payload is in the cache's own element type (kv_dtype); version 1 pages held float32
// whatever the cache was, so they are rejected (a miss) rather than misread.
inline constexpr uint16_t kPageFormatVersion = 2;

// Retention classes: each has its own TTL (retention.h).
enum class TrafficClass : uint8_t { kDefault = 0, kChat = 1, kAgent = 2 };
inline constexpr int kNumTrafficClasses = 3;

// On-disk header, little-endian (x86-64 and aarch64 hosts only; static_assert below).
struct PageHeader {
  char magic[8];               // "DIKVPAGE"
  uint16_t version;            // kPageFormatVersion
  uint8_t traffic_class;       // TrafficClass
  uint8_t kv_dtype;            // DType of the payload's elements: the KV cache's own
  uint32_t num_tokens;         // tokens in the page (the engine's block size)
  uint32_t page_index;         // position in the chain: tokens [page_index * num_tokens, +num_tokens)
  uint32_t reserved1;
  uint64_t layout_id;          // XXH3-64 of the model/KV layout fingerprint
  uint64_t payload_bytes;
  uint64_t created_unix_s;
  uint8_t chain_hash[32];      // the page's prefix-hash chain value: its key
  uint64_t body_xxh3_low;      // XXH3-128 over tokens and payload
  uint64_t body_xxh3_high;
  uint64_t header_xxh3;        // XXH3-64 over every header byte before this field
};
static_assert(sizeof(PageHeader) == 104, "PageHeader is a file format: keep its size");

// Owns one page image. The allocator hook lets a CUDA build keep host pages in pinned memory.
class HostAllocator {
 public:
  virtual ~HostAllocator() = default;
  virtual void* allocate(size_t bytes) = 0;
  virtual void deallocate(void* ptr, size_t bytes) = 0;
};
// operator new / delete; thread-safe.
HostAllocator& default_host_allocator();

class PageBuffer {
 public:
  PageBuffer(size_t size, HostAllocator& allocator);
  ~PageBuffer();
  PageBuffer(const PageBuffer&) = delete;
  PageBuffer& operator=(const PageBuffer&) = delete;
  uint8_t* data() { return data_; }
  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  std::span<const uint8_t> bytes() const { return {data_, size_}; }

 private:
  uint8_t* data_;
  size_t size_;
  HostAllocator& allocator_;
};
using SharedPage = std::shared_ptr<const PageBuffer>;

// What a page is expected to be when it is loaded; everything is compared, bytes for bytes.
struct PageIdentity {
  BlockHash chain_hash{};
  uint64_t layout_id = 0;
  int32_t page_index = 0;
  std::span<const int32_t> token_ids;  // the request's tokens for this page
  DType kv_dtype = DType::kF32;        // the payload's element type (the cache's)
};

struct PageContent {
  PageIdentity identity;
  TrafficClass traffic_class = TrafficClass::kDefault;
  int64_t created_unix_s = 0;
  std::span<const uint8_t> payload;
};

// Encodes header + tokens + payload into one buffer.
SharedPage encode_page(const PageContent& content, HostAllocator& allocator);

// The same in two steps, so the payload can be written in place (a device copies the KV straight
// into a pinned image): allocate_page makes the buffer, page_payload_region is where the KV goes,
// seal_page writes header, token ids and checksums around it (content.payload must be empty).
std::shared_ptr<PageBuffer> allocate_page(int32_t num_tokens, size_t payload_bytes, HostAllocator& allocator);
std::span<uint8_t> page_payload_region(PageBuffer& image, int32_t num_tokens);
SharedPage seal_page(std::shared_ptr<PageBuffer> image, const PageContent& content);

// The header alone, with its own checksum and the image size checked (for index rebuilds:
// bytes may hold just the header and total_size is the file's size).
Result<PageHeader> parse_page_header(std::span<const uint8_t> bytes, uint64_t total_size);

// Verifies a whole image against the expected identity (magic, version, header checksum,
// layout, element type, chain hash, page index, token ids, body checksum) and returns the
// payload view. Errors say which check failed.
Result<std::span<const uint8_t>> verify_page(std::span<const uint8_t> image, const PageIdentity& expected);
// The same in two steps: every check but the body checksum (cheap: the header and token ids), then
// the body checksum alone (one XXH3-128 pass over every byte), which may run beside a copy of the
// payload as long as nothing uses the copy before it passed.
Result<std::span<const uint8_t>> verify_page_identity(std::span<const uint8_t> image, const PageIdentity& expected);
Result<void> verify_page_body(std::span<const uint8_t> image);

// Bytes of the image that holds num_tokens tokens and payload_bytes of KV.
size_t page_image_bytes(int32_t num_tokens, size_t payload_bytes);

uint64_t layout_id_of(std::string_view fingerprint);
std::string hash_hex(const BlockHash& hash);

}  // namespace deepinfer
