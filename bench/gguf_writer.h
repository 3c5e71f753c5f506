// A small writer of GGUF v3, the file format llama.cpp loads: a header, typed metadata
// key/values, tensor infos, then the tensor data, each tensor aligned to 32 bytes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/result.h"

namespace deepinfer::bench {

// ggml's element types (ggml.h); only the unquantised ones are written here.
enum class GgmlType : uint32_t { kF32 = 0, kF16 = 1, kBF16 = 30 };

class GgufWriter {
 public:
  void add_string(const std::string& key, const std::string& value);
  void add_u32(const std::string& key, uint32_t value);
  void add_f32(const std::string& key, float value);
  void add_bool(const std::string& key, bool value);
  void add_string_array(const std::string& key, const std::vector<std::string>& values);
  void add_i32_array(const std::string& key, const std::vector<int32_t>& values);

  // shape is in row-major (transformers) order, [rows, cols]; the file stores it reversed
  // (ne[0] = cols). data must stay valid until write() returns; size_bytes must equal
  // numel * element size (checked).
  void add_tensor(const std::string& name, GgmlType type, const std::vector<int64_t>& shape, const void* data,
                  size_t size_bytes);
  // A tensor made of several sources in order (a MoE layer's experts stacked along shape[0]), each
  // numel elements of dtype (kF32, kF16 or kBF16), converted to type while written when it differs
  // (through float32).
  struct Piece {
    const void* data;
    int64_t numel;
    DType dtype;
  };
  void add_tensor(const std::string& name, GgmlType type, const std::vector<int64_t>& shape, std::vector<Piece> pieces);

  size_t num_tensors() const { return tensors_.size(); }
  // Writes the whole file; errors name the path and the system's reason.
  Result<void> write(const std::string& path) const;

 private:
  struct Tensor {
    std::string name;
    GgmlType type;
    std::vector<int64_t> shape;
    std::vector<Piece> pieces;
    size_t size_bytes;
  };

  void begin_kv(const std::string& key, uint32_t value_type);

  std::string metadata_;  // the serialised key/value pairs
  uint64_t num_kv_ = 0;
  std::vector<Tensor> tensors_;
};

}  // namespace deepinfer::bench
