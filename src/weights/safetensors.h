// Safetensors checkpoints, memory-mapped: one model.safetensors or a sharded set listed by
// model.safetensors.index.json. Tensors are views into the mapping (no copies).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/dtype.h"
#include "core/mapped_file.h"
#include "core/result.h"

namespace deepinfer {

struct TensorView {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  const void* data = nullptr;
  size_t size_bytes = 0;
  std::string file;  // the shard it lives in, for error messages

  int64_t numel() const;
};

// Formats a shape as "[a, b, c]".
std::string shape_to_string(const std::vector<int64_t>& shape);

class WeightStore {
 public:
  // Opens model.safetensors.index.json if present, else model.safetensors, in dir; else every
  // *.safetensors file in dir. Validates every header (JSON, dtype, offsets inside the file,
  // size = numel * element size, no overlaps) and shows a progress bar while it touches the
  // data. Errors name the file, the tensor and what was expected.
  static Result<WeightStore> open_dir(const std::string& dir, bool show_progress = true);
  // Opens one safetensors file.
  static Result<WeightStore> open_file(const std::string& path);

  std::optional<TensorView> find(const std::string& name) const;
  // The weight with this exact shape; errors: "model.layers.0.mlp.up_proj.weight is missing
  // from <dir>", "... in <file> has shape [a, b], expected [c, d]", or a U8 tensor (raw bytes,
  // e.g. MXFP4 blocks: read those with find()) where a numeric weight belongs.
  Result<TensorView> get(const std::string& name, const std::vector<int64_t>& expected_shape) const;
  std::vector<std::string> names() const;
  // The same tensors over the same mappings, each name that starts with renames[i].first (the
  // first that matches) starting with renames[i].second instead: how a builder reads a model nested
  // in a larger checkpoint (a multimodal one's language model) under the plain model's names. Two
  // tensors meeting under one name is an error naming both.
  Result<WeightStore> with_prefixes_renamed(const std::vector<std::pair<std::string, std::string>>& renames) const;
  uint64_t total_bytes() const;
  const std::string& source() const { return source_; }
  // The __metadata__ strings of every file (the first file wins on a repeated key).
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

 private:
  std::string source_;
  std::vector<std::shared_ptr<MappedFile>> files_;
  std::map<std::string, TensorView> tensors_;
  std::map<std::string, std::string> metadata_;
  friend class WeightStoreBuilder;
};

// Writes tensors (name, dtype, shape, data) as one safetensors file, header sorted by name,
// with optional string metadata. Used for random models, tests and tools.
Result<void> write_safetensors(const std::string& path, const std::vector<TensorView>& tensors,
                               const std::map<std::string, std::string>& metadata = {});

}  // namespace deepinfer
