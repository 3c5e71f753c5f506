// SHA-256 through OpenSSL's libcrypto: the prefix cache's hash chain and content hashes (images).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

struct evp_md_ctx_st;

namespace deepinfer {

using Sha256Digest = std::array<uint8_t, 32>;

// One SHA-256 computation fed piece by piece. Not thread-safe (one owner); every libcrypto call is
// checked, because a silent failure would corrupt whatever the hash identifies.
class Sha256 {
 public:
  Sha256();
  ~Sha256();
  Sha256(const Sha256&) = delete;
  Sha256& operator=(const Sha256&) = delete;

  void update(const void* data, size_t size);
  // value as 8 little-endian bytes: lengths framed the same way on every host.
  void update_u64le(uint64_t value);
  // The digest; the object is spent afterwards.
  Sha256Digest finish();

 private:
  evp_md_ctx_st* ctx_;
};

Sha256Digest sha256(std::span<const uint8_t> data);
// 64 lowercase hex digits.
std::string to_hex(const Sha256Digest& digest);
// to_hex's inverse; nullopt for anything but 64 lowercase hex digits.
std::optional<Sha256Digest> digest_from_hex(std::string_view hex);

}  // namespace deepinfer
