// Page image encoding and verification with XXH3 (libxxhash).
#include "kvstore/page_format.h"

#include <xxhash.h>

#include <bit>
#include <cstring>
#include <new>

#include "core/check.h"

namespace deepinfer {
namespace {

static_assert(std::endian::native == std::endian::little, "page images are little-endian");
constexpr char kMagic[8] = {'D', 'I', 'K', 'V', 'P', 'A', 'G', 'E'};

class NewDeleteAllocator final : public HostAllocator {
 public:
  void* allocate(size_t bytes) override { return ::operator new(bytes); }
  void deallocate(void* ptr, size_t) override { ::operator delete(ptr); }
};

uint64_t header_checksum(const PageHeader& header) {
  return XXH3_64bits(&header, offsetof(PageHeader, header_xxh3));
}

}  // namespace

HostAllocator& default_host_allocator() {
  static NewDeleteAllocator allocator;
  return allocator;
}

PageBuffer::PageBuffer(size_t size, HostAllocator& allocator)
    : data_(static_cast<uint8_t*>(allocator.allocate(size))), size_(size), allocator_(allocator) {}

PageBuffer::~PageBuffer() { allocator_.deallocate(data_, size_); }

size_t page_image_bytes(int32_t num_tokens, size_t payload_bytes) {
  return sizeof(PageHeader) + static_cast<size_t>(num_tokens) * sizeof(int32_t) + payload_bytes;
}

uint64_t layout_id_of(std::string_view fingerprint) { return XXH3_64bits(fingerprint.data(), fingerprint.size()); }

std::string hash_hex(const BlockHash& hash) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out(hash.size() * 2, '0');
  for (size_t i = 0; i < hash.size(); ++i) {
    out[2 * i] = kDigits[hash[i] >> 4];
    out[2 * i + 1] = kDigits[hash[i] & 15];
  }
  return out;
}

std::shared_ptr<PageBuffer> allocate_page(int32_t num_tokens, size_t payload_bytes, HostAllocator& allocator) {
  return std::make_shared<PageBuffer>(page_image_bytes(num_tokens, payload_bytes), allocator);
}

std::span<uint8_t> page_payload_region(PageBuffer& image, int32_t num_tokens) {
  const size_t offset = page_image_bytes(num_tokens, 0);
  DI_CHECK(offset <= image.size(), "page buffer smaller than its header and tokens");
  return {image.data() + offset, image.size() - offset};
}

SharedPage encode_page(const PageContent& content, HostAllocator& allocator) {
  const auto num_tokens = static_cast<int32_t>(content.identity.token_ids.size());
  std::shared_ptr<PageBuffer> image = allocate_page(num_tokens, content.payload.size(), allocator);
  if (!content.payload.empty()) {
    std::memcpy(page_payload_region(*image, num_tokens).data(), content.payload.data(), content.payload.size());
  }
  PageContent header_only = content;
  header_only.payload = {};
  return seal_page(std::move(image), header_only);
}

SharedPage seal_page(std::shared_ptr<PageBuffer> image, const PageContent& content) {
  DI_CHECK(content.payload.empty(), "seal_page takes the payload already in the image");
  const PageIdentity& id = content.identity;
  const auto num_tokens = static_cast<int32_t>(id.token_ids.size());
  const size_t payload_bytes = page_payload_region(*image, num_tokens).size();
  PageHeader header{};
  std::memcpy(header.magic, kMagic, sizeof(kMagic));
  header.version = kPageFormatVersion;
  header.traffic_class = static_cast<uint8_t>(content.traffic_class);
  header.kv_dtype = static_cast<uint8_t>(id.kv_dtype);
  header.num_tokens = static_cast<uint32_t>(num_tokens);
  header.page_index = static_cast<uint32_t>(id.page_index);
  header.layout_id = id.layout_id;
  header.payload_bytes = payload_bytes;
  header.created_unix_s = static_cast<uint64_t>(content.created_unix_s);
  std::memcpy(header.chain_hash, id.chain_hash.data(), id.chain_hash.size());
  uint8_t* body = image->data() + sizeof(PageHeader);
  std::memcpy(body, id.token_ids.data(), id.token_ids.size_bytes());
  const XXH128_hash_t sum = XXH3_128bits(body, image->size() - sizeof(PageHeader));
  header.body_xxh3_low = sum.low64;
  header.body_xxh3_high = sum.high64;
  header.header_xxh3 = header_checksum(header);
  std::memcpy(image->data(), &header, sizeof(header));
  return image;
}

Result<PageHeader> parse_page_header(std::span<const uint8_t> bytes, uint64_t total_size) {
  if (bytes.size() < sizeof(PageHeader)) {
    return Error{"page image has " + std::to_string(bytes.size()) + " bytes, less than its " +
                 std::to_string(sizeof(PageHeader)) + "-byte header (truncated)"};
  }
  PageHeader header;
  std::memcpy(&header, bytes.data(), sizeof(header));
  if (std::memcmp(header.magic, kMagic, sizeof(kMagic)) != 0) return Error{"page header has no DIKVPAGE magic"};
  if (header.version != kPageFormatVersion) {
    return Error{"page format version " + std::to_string(header.version) + ", expected " +
                 std::to_string(kPageFormatVersion)};
  }
  if (header.header_xxh3 != header_checksum(header)) return Error{"page header checksum mismatch"};
  if (header.traffic_class >= kNumTrafficClasses) return Error{"page header has an unknown traffic class"};
  const uint64_t expected = page_image_bytes(static_cast<int32_t>(header.num_tokens), header.payload_bytes);
  if (total_size != expected) {
    return Error{"page image has " + std::to_string(total_size) + " bytes, its header says " + std::to_string(expected)};
  }
  return header;
}

Result<std::span<const uint8_t>> verify_page_identity(std::span<const uint8_t> image, const PageIdentity& expected) {
  auto parsed = parse_page_header(image, image.size());
  if (!parsed.ok()) return parsed.error();
  const PageHeader& header = *parsed;
  if (header.layout_id != expected.layout_id) return Error{"page was written for another model or KV layout"};
  if (header.kv_dtype != static_cast<uint8_t>(expected.kv_dtype)) {
    return Error{"page holds KV of another element type than the cache's " + std::string(dtype_name(expected.kv_dtype))};
  }
  if (std::memcmp(header.chain_hash, expected.chain_hash.data(), expected.chain_hash.size()) != 0) {
    return Error{"page chain hash differs from its key"};
  }
  if (header.page_index != static_cast<uint32_t>(expected.page_index)) return Error{"page index differs"};
  if (header.num_tokens != expected.token_ids.size()) return Error{"page token count differs"};
  const uint8_t* body = image.data() + sizeof(PageHeader);
  if (std::memcmp(body, expected.token_ids.data(), expected.token_ids.size_bytes()) != 0) {
    return Error{"page token ids differ from the request's"};
  }
  const size_t tokens_bytes = expected.token_ids.size_bytes();
  return std::span<const uint8_t>(body + tokens_bytes, image.size() - sizeof(PageHeader) - tokens_bytes);
}

Result<void> verify_page_body(std::span<const uint8_t> image) {
  DI_CHECK(image.size() >= sizeof(PageHeader), "verify_page_body before verify_page_identity");
  PageHeader header;
  std::memcpy(&header, image.data(), sizeof(header));
  const XXH128_hash_t sum = XXH3_128bits(image.data() + sizeof(PageHeader), image.size() - sizeof(PageHeader));
  if (sum.low64 != header.body_xxh3_low || sum.high64 != header.body_xxh3_high) {
    return Error{"page body checksum mismatch"};
  }
  return {};
}

Result<std::span<const uint8_t>> verify_page(std::span<const uint8_t> image, const PageIdentity& expected) {
  auto payload = verify_page_identity(image, expected);
  if (!payload.ok()) return payload.error();
  auto body = verify_page_body(image);
  if (!body.ok()) return body.error();
  return payload;
}

}  // namespace deepinfer
