// Internal to weights/: safetensors header validation and the builder that fills a WeightStore,
// shared by the single-file loader (safetensors.cpp) and the directory loader (weight_dir.cpp).
#pragma once

#include <map>
#include <string>
#include <vector>

#include "core/mapped_file.h"
#include "core/result.h"
#include "weights/safetensors.h"

namespace deepinfer {

// Validates the header of a mapped safetensors file (length, JSON, dtypes, shapes, offsets
// inside the file, size = numel * element size, no overlaps) and returns its tensors as views
// into the mapping, in header order. Adds the __metadata__ strings to metadata.
Result<std::vector<TensorView>> parse_safetensors_header(const MappedFile& file,
                                                         std::map<std::string, std::string>& metadata);

// Fills a WeightStore file by file. Not thread-safe.
class WeightStoreBuilder {
 public:
  explicit WeightStoreBuilder(std::string source);

  // Maps path, validates its header and adds its tensors; a tensor name that an earlier file
  // already holds is an error naming both files.
  Result<void> add_file(const std::string& path);
  const WeightStore& store() const { return store_; }
  // Reads one byte of every page of every file (after MADV_WILLNEED) so the first forward pass
  // does not stall on page faults; shows a progress bar in bytes when show_progress.
  void prefault(bool show_progress);
  WeightStore finish() { return std::move(store_); }

 private:
  WeightStore store_;
};

}  // namespace deepinfer
