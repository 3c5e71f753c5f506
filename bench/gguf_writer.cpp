// GGUF v3 serialisation: little-endian integers, strings as (u64 length, bytes), arrays as
// (element type, u64 count, elements), tensor offsets relative to the aligned data section.
#include "gguf_writer.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>
#include <vector>

#include "core/check.h"

namespace deepinfer::bench {
namespace {

constexpr uint32_t kVersion = 3;
constexpr uint64_t kAlignment = 32;  // GGUF's default, used when general.alignment is absent

// gguf_type values (gguf.h).
constexpr uint32_t kTypeUint32 = 4;
constexpr uint32_t kTypeInt32 = 5;
constexpr uint32_t kTypeFloat32 = 6;
constexpr uint32_t kTypeBool = 7;
constexpr uint32_t kTypeString = 8;
constexpr uint32_t kTypeArray = 9;

template <typename T>
void append_pod(std::string& out, T value) {
  char bytes[sizeof(T)];
  std::memcpy(bytes, &value, sizeof(T));  // the host is little-endian, as GGUF is
  out.append(bytes, sizeof(T));
}

void append_string(std::string& out, const std::string& value) {
  append_pod<uint64_t>(out, value.size());
  out.append(value);
}

size_t element_size_bytes(GgmlType type) { return type == GgmlType::kF32 ? 4 : 2; }

DType dtype_of(GgmlType type) {
  return type == GgmlType::kF32 ? DType::kF32 : type == GgmlType::kF16 ? DType::kF16 : DType::kBF16;
}

// Writes piece's elements as type, converting a chunk at a time when its dtype differs.
bool write_piece(FILE* file, const GgufWriter::Piece& piece, GgmlType type) {
  const size_t out_size = element_size_bytes(type);
  if (piece.dtype == dtype_of(type)) {
    const size_t bytes = static_cast<size_t>(piece.numel) * out_size;
    return std::fwrite(piece.data, 1, bytes, file) == bytes;
  }
  constexpr int64_t kChunk = int64_t{1} << 20;
  std::vector<float> values(static_cast<size_t>(std::min(piece.numel, kChunk)));
  std::vector<uint16_t> halves(type == GgmlType::kF32 ? 0 : values.size());
  const auto* src = static_cast<const char*>(piece.data);
  for (int64_t done = 0; done < piece.numel; done += kChunk) {
    const auto n = static_cast<size_t>(std::min(kChunk, piece.numel - done));
    convert_to_f32(src + static_cast<size_t>(done) * dtype_size_bytes(piece.dtype), piece.dtype, n, values.data());
    const void* out = values.data();
    if (type != GgmlType::kF32) {
      for (size_t i = 0; i < n; ++i)
        halves[i] = type == GgmlType::kF16 ? f32_to_f16(values[i]) : f32_to_bf16(values[i]);
      out = halves.data();
    }
    if (std::fwrite(out, out_size, n, file) != n) return false;
  }
  return true;
}

uint64_t align_up(uint64_t offset) { return (offset + kAlignment - 1) / kAlignment * kAlignment; }

}  // namespace

void GgufWriter::begin_kv(const std::string& key, uint32_t value_type) {
  append_string(metadata_, key);
  append_pod<uint32_t>(metadata_, value_type);
  ++num_kv_;
}

void GgufWriter::add_string(const std::string& key, const std::string& value) {
  begin_kv(key, kTypeString);
  append_string(metadata_, value);
}

void GgufWriter::add_u32(const std::string& key, uint32_t value) {
  begin_kv(key, kTypeUint32);
  append_pod(metadata_, value);
}

void GgufWriter::add_f32(const std::string& key, float value) {
  begin_kv(key, kTypeFloat32);
  append_pod(metadata_, value);
}

void GgufWriter::add_bool(const std::string& key, bool value) {
  begin_kv(key, kTypeBool);
  append_pod<int8_t>(metadata_, value ? 1 : 0);
}

void GgufWriter::add_string_array(const std::string& key, const std::vector<std::string>& values) {
  begin_kv(key, kTypeArray);
  append_pod<uint32_t>(metadata_, kTypeString);
  append_pod<uint64_t>(metadata_, values.size());
  for (const std::string& value : values) append_string(metadata_, value);
}

void GgufWriter::add_i32_array(const std::string& key, const std::vector<int32_t>& values) {
  begin_kv(key, kTypeArray);
  append_pod<uint32_t>(metadata_, kTypeInt32);
  append_pod<uint64_t>(metadata_, values.size());
  for (int32_t value : values) append_pod(metadata_, value);
}

void GgufWriter::add_tensor(const std::string& name, GgmlType type, const std::vector<int64_t>& shape,
                            const void* data, size_t size_bytes) {
  DI_CHECK(size_bytes % element_size_bytes(type) == 0, name << ": " << size_bytes << " bytes");
  add_tensor(name, type, shape, {{data, static_cast<int64_t>(size_bytes / element_size_bytes(type)), dtype_of(type)}});
}

void GgufWriter::add_tensor(const std::string& name, GgmlType type, const std::vector<int64_t>& shape,
                            std::vector<Piece> pieces) {
  uint64_t numel = 1;
  for (int64_t dim : shape) numel *= static_cast<uint64_t>(dim);
  uint64_t pieces_numel = 0;
  for (const Piece& piece : pieces) pieces_numel += static_cast<uint64_t>(piece.numel);
  DI_CHECK(numel == pieces_numel, name << ": " << pieces_numel << " elements for a shape of " << numel);
  tensors_.push_back({name, type, shape, std::move(pieces), numel * element_size_bytes(type)});
}

Result<void> GgufWriter::write(const std::string& path) const {
  std::string header;
  header.append("GGUF");
  append_pod(header, kVersion);
  append_pod<uint64_t>(header, tensors_.size());
  append_pod<uint64_t>(header, num_kv_);
  header.append(metadata_);
  uint64_t offset = 0;
  for (const Tensor& t : tensors_) {
    append_string(header, t.name);
    append_pod<uint32_t>(header, static_cast<uint32_t>(t.shape.size()));
    for (auto dim = t.shape.rbegin(); dim != t.shape.rend(); ++dim) append_pod<uint64_t>(header, *dim);
    append_pod<uint32_t>(header, static_cast<uint32_t>(t.type));
    append_pod<uint64_t>(header, offset);
    offset = align_up(offset + t.size_bytes);
  }
  header.resize(align_up(header.size()), '\0');

  std::unique_ptr<FILE, int (*)(FILE*)> file(std::fopen(path.c_str(), "wb"), &std::fclose);
  if (!file) return Error{"cannot create " + path + ": " + std::strerror(errno)};
  const char padding[kAlignment] = {};
  bool ok = std::fwrite(header.data(), 1, header.size(), file.get()) == header.size();
  for (const Tensor& t : tensors_) {
    if (!ok) break;
    for (const Piece& piece : t.pieces) ok = ok && write_piece(file.get(), piece, t.type);
    const size_t pad = align_up(t.size_bytes) - t.size_bytes;
    ok = ok && std::fwrite(padding, 1, pad, file.get()) == pad;
  }
  if (!ok || std::fclose(file.release()) != 0) return Error{"cannot write " + path + ": " + std::strerror(errno)};
  return {};
}

}  // namespace deepinfer::bench
