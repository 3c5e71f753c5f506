// Temporary file + fsync + rename + directory fsync, and the names that tell a dead writer's files.
#include "kvstore/durable_file.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <charconv>
#include <climits>
#include <cstdio>
#include <cstring>
#include <filesystem>

namespace deepinfer {
namespace {

namespace fs = std::filesystem;

Error system_error(const std::string& what, int error_number) {
  return Error{what + ": " + std::strerror(error_number)};
}

// The host name and the pid namespace: a pid means a process only where both are the same (two
// containers of one host may share its name, but not their pids).
const std::string& host_tag() {
  static const std::string tag = [] {
    char name[HOST_NAME_MAX + 1] = {};
    ::gethostname(name, sizeof(name) - 1);
    char pid_namespace[64] = {};
    const ssize_t length = ::readlink("/proc/self/ns/pid", pid_namespace, sizeof(pid_namespace) - 1);
    const std::string host =
        std::string(name) + "|" + std::string(pid_namespace, static_cast<size_t>(std::max<ssize_t>(length, 0)));
    char hex[17];
    std::snprintf(hex, sizeof(hex), "%016llx", static_cast<unsigned long long>(XXH3_64bits(host.data(), host.size())));
    return std::string(hex);
  }();
  return tag;
}

// Creates dir and any missing parent, each new entry made durable in its parent.
Result<void> make_directory_durably(const fs::path& dir) {
  std::error_code ec;
  if (fs::is_directory(dir, ec)) return {};
  const fs::path parent = dir.parent_path();
  if (!parent.empty() && parent != dir) {
    if (auto made = make_directory_durably(parent); !made.ok()) return made;
  }
  if (::mkdir(dir.c_str(), 0755) != 0 && errno != EEXIST) return system_error("cannot create " + dir.string(), errno);
  return fsync_directory(parent.empty() ? "." : parent.string());
}

}  // namespace

bool write_all(int fd, const uint8_t* data, size_t size) {
  while (size > 0) {
    const ssize_t n = ::write(fd, data, size);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    data += n;
    size -= static_cast<size_t>(n);
  }
  return true;
}

bool read_all(int fd, uint8_t* data, size_t size) {
  while (size > 0) {
    const ssize_t n = ::read(fd, data, size);
    if (n < 0 && errno == EINTR) continue;
    if (n == 0) errno = 0;
    if (n <= 0) return false;
    data += n;
    size -= static_cast<size_t>(n);
  }
  return true;
}

Result<void> fsync_directory(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return system_error("cannot open directory " + dir, errno);
  const bool ok = ::fsync(fd) == 0;
  const int error_number = errno;
  ::close(fd);
  if (!ok) return system_error("cannot fsync directory " + dir, error_number);
  return {};
}

std::string temp_file_name() {
  static std::atomic<uint64_t> counter{0};
  return host_tag() + "." + std::to_string(::getpid()) + "." + std::to_string(counter.fetch_add(1)) + ".tmp";
}

bool temp_file_writer_is_gone(std::string_view name) {
  const std::string& host = host_tag();
  if (!name.starts_with(host) || name.size() <= host.size() || name[host.size()] != '.') return false;
  const std::string_view rest = name.substr(host.size() + 1);
  pid_t pid = 0;
  const auto [end, ec] = std::from_chars(rest.data(), rest.data() + rest.size(), pid);
  if (ec != std::errc() || end == rest.data() || *end != '.' || pid <= 0 || pid == ::getpid()) return false;
  return ::kill(pid, 0) != 0 && errno == ESRCH;
}

Result<void> write_file_durably(const std::string& temp_dir, const std::string& path, std::span<const uint8_t> bytes,
                                std::optional<int64_t> mtime_unix_s, const BeforeRename& before_rename) {
  const std::string temp = temp_dir + "/" + temp_file_name();
  const int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) return system_error("cannot create " + temp, errno);
  Result<void> result;
  if (!write_all(fd, bytes.data(), bytes.size())) {
    result = system_error("cannot write " + temp, errno);
  } else {
    if (mtime_unix_s) {
      const timespec times[2] = {{static_cast<time_t>(*mtime_unix_s), 0}, {static_cast<time_t>(*mtime_unix_s), 0}};
      ::futimens(fd, times);
    }
    // The data reaches the disk before the name does: a rename that survives a power loss
    // never names a file whose blocks were not written.
    if (::fsync(fd) != 0) result = system_error("cannot fsync " + temp, errno);
  }
  ::close(fd);
  const fs::path dir = fs::path(path).parent_path();
  if (result.ok()) result = make_directory_durably(dir);
  if (result.ok() && before_rename) before_rename(temp);
  if (result.ok() && ::rename(temp.c_str(), path.c_str()) != 0) {
    result = system_error("cannot rename " + temp + " to " + path, errno);
  }
  if (!result.ok()) {
    ::unlink(temp.c_str());
    return result;
  }
  result = fsync_directory(dir.string());
  // A name the caller is told was not written must not stay: its owner would never index it.
  if (!result.ok()) ::unlink(path.c_str());
  return result;
}

}  // namespace deepinfer
