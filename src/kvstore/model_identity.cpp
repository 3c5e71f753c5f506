// Model-directory identity: safetensors headers, content hashes and their on-disk cache.
#include "kvstore/model_identity.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/logging.h"
#include "core/mapped_file.h"
#include "kvstore/durable_file.h"

namespace deepinfer {
namespace {

namespace fs = std::filesystem;

constexpr const char* kCacheHeading = "deepinfer-model-hashes 1";
// Small enough that the bytes read() copied are still in the core's L2 cache when the hash reads
// them: 3.0-3.4 GB/s per CPU second on the build machine, against 1.3 with 8 MiB pieces.
constexpr size_t kReadChunkBytes = size_t{128} << 10;
// The safetensors format caps its JSON header at 100 MB.
constexpr uint64_t kMaxHeaderBytes = uint64_t{100} << 20;

std::string hex64(uint64_t value) {
  char hex[17];
  std::snprintf(hex, sizeof(hex), "%016llx", static_cast<unsigned long long>(value));
  return hex;
}

uint64_t line_checksum(std::string_view text) { return XXH3_64bits(text.data(), text.size()); }

std::string entry_text(const FileKey& key, const std::string& content_hash) {
  std::ostringstream out;
  out << key.device << ' ' << key.inode << ' ' << key.size_bytes << ' ' << key.mtime_ns << ' ' << key.ctime_ns << ' '
      << content_hash;
  return out.str();
}

std::optional<std::pair<FileKey, std::string>> parse_entry(const std::string& line) {
  const size_t last_space = line.rfind(' ');
  if (last_space == std::string::npos) return std::nullopt;
  const std::string text = line.substr(0, last_space);
  if (line.substr(last_space + 1) != hex64(line_checksum(text))) return std::nullopt;
  std::istringstream in(text);
  FileKey key;
  std::string content_hash;
  if (!(in >> key.device >> key.inode >> key.size_bytes >> key.mtime_ns >> key.ctime_ns >> content_hash) ||
      content_hash.size() != 32 || entry_text(key, content_hash) != text) {
    return std::nullopt;
  }
  return std::make_pair(key, content_hash);
}

FileKey key_of(const struct stat& st) {
  FileKey key;
  key.device = static_cast<uint64_t>(st.st_dev);
  key.inode = static_cast<uint64_t>(st.st_ino);
  key.size_bytes = static_cast<int64_t>(st.st_size);
  key.mtime_ns = static_cast<int64_t>(st.st_mtim.tv_sec) * 1'000'000'000 + st.st_mtim.tv_nsec;
  key.ctime_ns = static_cast<int64_t>(st.st_ctim.tv_sec) * 1'000'000'000 + st.st_ctim.tv_nsec;
  return key;
}

// XXH3-64 of a safetensors file's 8-byte length and JSON header: every tensor's name, dtype,
// shape and offsets.
Result<std::string> header_hash(int fd, const std::string& path, int64_t size_bytes) {
  uint64_t length = 0;
  if (!read_all(fd, reinterpret_cast<uint8_t*>(&length), sizeof(length)) || length > kMaxHeaderBytes ||
      length > static_cast<uint64_t>(size_bytes) - sizeof(length)) {
    return Error{path + " is not a safetensors file: no header of a valid length at its start"};
  }
  std::vector<uint8_t> header(sizeof(length) + length);
  std::memcpy(header.data(), &length, sizeof(length));
  if (!read_all(fd, header.data() + sizeof(length), length)) return Error{"cannot read the header of " + path};
  return hex64(XXH3_64bits(header.data(), header.size()));
}

Result<std::string> content_hash(int fd, const std::string& path) {
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_SEQUENTIAL);
  std::vector<uint8_t> buffer(kReadChunkBytes);
  XXH3_state_t* state = XXH3_createState();
  XXH3_128bits_reset(state);
  off_t offset = 0;
  ssize_t n = 0;
  while ((n = ::pread(fd, buffer.data(), buffer.size(), offset)) != 0) {
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      XXH3_freeState(state);
      return Error{"cannot read " + path + " to hash it: " + std::strerror(errno)};
    }
    XXH3_128bits_update(state, buffer.data(), static_cast<size_t>(n));
    offset += n;
  }
  const XXH128_hash_t sum = XXH3_128bits_digest(state);
  XXH3_freeState(state);
  return hex64(sum.high64) + hex64(sum.low64);
}

// What the content hashes read at this start (the log's figures).
struct HashedBytes {
  int64_t num_files = 0;
  int64_t num_bytes = 0;
  double seconds = 0.0;
};

// One weight file's part of the identity: name, size, header hash, content hash.
Result<std::string> weight_file_identity(const fs::path& file, std::optional<ContentHashCache>& cache,
                                         HashedBytes& hashed_bytes) {
  const std::string path = file.string();
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  struct stat st {};
  if (fd < 0 || ::fstat(fd, &st) != 0) {
    const int error_number = errno;
    if (fd >= 0) ::close(fd);
    return Error{"cannot read " + path + " to fingerprint the model: " + std::strerror(error_number)};
  }
  const FileKey key = key_of(st);
  auto header = header_hash(fd, path, key.size_bytes);
  std::optional<std::string> content = cache ? cache->find(key) : std::nullopt;
  if (header.ok() && !content) {
    if (hashed_bytes.num_files == 0) {
      DI_LOG(kInfo, "kv store: hashing the model's weights for its identity in the store's keys (once: the "
                    "hashes are cached until the files change)");
    }
    const auto start = std::chrono::steady_clock::now();
    auto hashed = content_hash(fd, path);
    if (!hashed.ok()) {
      ::close(fd);
      return hashed.error();
    }
    content = *hashed;
    hashed_bytes.num_files++;
    hashed_bytes.num_bytes += key.size_bytes;
    hashed_bytes.seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    // A file written while it was read has no trustworthy hash to keep.
    struct stat after {};
    if (cache && ::fstat(fd, &after) == 0 && key_of(after) == key) cache->insert(key, *content);
  }
  ::close(fd);
  if (!header.ok()) return header.error();
  return file.filename().string() + ":" + std::to_string(key.size_bytes) + ":header=" + *header + ":content=" +
         *content + ";";
}

}  // namespace

Result<FileKey> file_key_of(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return Error{"cannot stat " + path + ": " + std::strerror(errno)};
  return key_of(st);
}

ContentHashCache ContentHashCache::load(std::string path) {
  ContentHashCache cache;
  cache.path_ = std::move(path);
  std::ifstream in(cache.path_);
  std::string line;
  if (!std::getline(in, line) || line != kCacheHeading) return cache;
  while (std::getline(in, line)) {
    if (auto entry = parse_entry(line)) cache.entries_.push_back(std::move(*entry));
  }
  return cache;
}

std::optional<std::string> ContentHashCache::find(const FileKey& key) const {
  for (auto it = entries_.rbegin(); it != entries_.rend(); ++it) {
    if (it->first == key) return it->second;
  }
  return std::nullopt;
}

void ContentHashCache::insert(const FileKey& key, std::string content_hash) {
  std::erase_if(entries_, [&](const auto& entry) { return entry.first == key; });
  entries_.emplace_back(key, std::move(content_hash));
  changed_ = true;
}

Result<void> ContentHashCache::save() {
  if (!changed_) return {};
  const size_t first = entries_.size() > kMaxEntries ? entries_.size() - kMaxEntries : 0;
  std::string text = std::string(kCacheHeading) + "\n";
  for (size_t i = first; i < entries_.size(); ++i) {
    const std::string entry = entry_text(entries_[i].first, entries_[i].second);
    text += entry + " " + hex64(line_checksum(entry)) + "\n";
  }
  const fs::path dir = fs::path(path_).parent_path();
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return Error{"cannot create " + dir.string() + ": " + ec.message()};
  auto written = write_file_durably(dir.string(), path_,
                                    std::span(reinterpret_cast<const uint8_t*>(text.data()), text.size()));
  if (written.ok()) changed_ = false;
  return written;
}

std::string model_hash_cache_path(const std::string& store_dir) {
  if (!store_dir.empty()) return store_dir + "/model-hashes";
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg != nullptr && *xdg != '\0') {
    return std::string(xdg) + "/deepinfer/model-hashes";
  }
  if (const char* home = std::getenv("HOME"); home != nullptr && *home != '\0') {
    return std::string(home) + "/.cache/deepinfer/model-hashes";
  }
  return {};
}

Result<std::string> fingerprint_model_dir(const std::string& dir, const std::string& hash_cache_path) {
  std::error_code ec;
  std::vector<fs::path> files;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (entry.path().extension() == ".safetensors" || name == "tokenizer.json" || name == "tokenizer_config.json") {
      files.push_back(entry.path());
    }
  }
  if (ec) return Error{"cannot list model directory " + dir + ": " + ec.message()};
  std::sort(files.begin(), files.end());
  std::optional<ContentHashCache> cache;
  if (!hash_cache_path.empty()) cache = ContentHashCache::load(hash_cache_path);
  std::string identity;
  HashedBytes hashed_bytes;
  for (const fs::path& file : files) {
    if (file.extension() == ".safetensors") {
      auto part = weight_file_identity(file, cache, hashed_bytes);
      if (!part.ok()) return part.error();
      identity += *part;
      continue;
    }
    auto text = read_text_file(file.string());
    if (!text.ok()) return text.error();
    identity += file.filename().string() + "=" + hex64(XXH3_64bits(text->data(), text->size())) + ";";
  }
  if (hashed_bytes.num_files > 0) {
    DI_LOG(kInfo, "kv store: hashed " << hashed_bytes.num_files << " weight files, "
                                      << hashed_bytes.num_bytes / 1e6 << " MB in " << hashed_bytes.seconds << " s ("
                                      << hashed_bytes.num_bytes / 1e6 / std::max(hashed_bytes.seconds, 1e-9)
                                      << " MB/s)");
  }
  if (cache) {
    if (auto saved = cache->save(); !saved.ok()) {
      DI_LOG(kWarn, "kv store: cannot keep the model's content hashes ("
                        << saved.error().message << "); the next start hashes the weights again");
    }
  }
  return identity;
}

}  // namespace deepinfer
