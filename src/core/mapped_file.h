// A read-only memory-mapped file (RAII); the mapping lives as long as the object.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "core/result.h"

namespace deepinfer {

class MappedFile {
 public:
  // Maps the whole file read-only. Errors name the path and the system's reason.
  static Result<std::shared_ptr<MappedFile>> open(const std::string& path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const uint8_t* data() const { return data_; }
  size_t size_bytes() const { return size_bytes_; }
  const std::string& path() const { return path_; }

 private:
  MappedFile(std::string path, const uint8_t* data, size_t size_bytes)
      : path_(std::move(path)), data_(data), size_bytes_(size_bytes) {}
  std::string path_;
  const uint8_t* data_;
  size_t size_bytes_;
};

// Reads a whole (small) file into a string.
Result<std::string> read_text_file(const std::string& path);

}  // namespace deepinfer
