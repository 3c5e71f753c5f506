// The identity of a model directory in the persistent KV store's keys: every safetensors
// header and a hash of every weight byte, so that no other model, nor a fine-tune of this one
// with the same shapes, ever loads its pages. Content hashes are cached per file on disk,
// keyed by what changes when the file does, so a start-up reads only the headers.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/result.h"

namespace deepinfer {

// What identifies a file's content on disk without reading it: any write changes its ctime
// (which, unlike the mtime, cannot be set back), a replacement its inode.
struct FileKey {
  uint64_t device = 0;
  uint64_t inode = 0;
  int64_t size_bytes = 0;
  int64_t mtime_ns = 0;
  int64_t ctime_ns = 0;
  auto operator<=>(const FileKey&) const = default;
};
Result<FileKey> file_key_of(const std::string& path);

// Content hashes (XXH3-128, 32 hex digits) of files by FileKey, kept in one text file. Each line
// carries its own checksum: a torn or corrupt line is dropped and its file hashed again. save
// replaces the file whole (durable_file.h), so processes sharing it lose at most each other's
// newest entries. Not thread-safe.
class ContentHashCache {
 public:
  // Reads path; a missing, unreadable or foreign file is an empty cache.
  static ContentHashCache load(std::string path);
  std::optional<std::string> find(const FileKey& key) const;
  void insert(const FileKey& key, std::string content_hash);
  // Writes the entries back if insert changed them, the newest kMaxEntries only (entries of
  // replaced files are never looked up again).
  Result<void> save();
  size_t num_entries() const { return entries_.size(); }

  static constexpr size_t kMaxEntries = 4096;

 private:
  std::string path_;
  std::vector<std::pair<FileKey, std::string>> entries_;  // oldest first
  bool changed_ = false;
};

// Where the content-hash cache lives: in the store directory, or without one (a Redis-only
// store) in $XDG_CACHE_HOME/deepinfer (~/.cache/deepinfer); empty when neither is known.
std::string model_hash_cache_path(const std::string& store_dir);

// The identity of a model directory: for each *.safetensors file its name, size, XXH3-64 of its
// header (read at every call) and XXH3-128 of its whole content (from hash_cache when its
// FileKey is there, else read once and cached; empty hash_cache_path: always read); XXH3-64 of
// tokenizer.json and tokenizer_config.json. A cache that cannot be written costs the next start
// a new hash, nothing else. Errors: an unreadable directory or file, a malformed header.
Result<std::string> fingerprint_model_dir(const std::string& dir, const std::string& hash_cache_path = "");

}  // namespace deepinfer
