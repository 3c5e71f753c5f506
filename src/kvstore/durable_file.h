// Files that a crash or a power loss leaves whole or absent, never torn: written under a
// temporary name, fsynced, renamed into place, then the directory fsynced. Shared by the disk
// tier's pages and the model identity's content-hash cache.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "core/result.h"

namespace deepinfer {

// Whole-buffer read and write on a file descriptor, retried on EINTR; false on an error or an
// early end of file (errno then says why, or is 0 at the end of the file).
bool write_all(int fd, const uint8_t* data, size_t size);
bool read_all(int fd, uint8_t* data, size_t size);

// Makes the entries created, renamed or removed in dir durable.
Result<void> fsync_directory(const std::string& dir);

// A temporary file's name, unique across the processes and hosts that share a directory:
// "<XXH3-64 of the host name and pid namespace>.<pid>.<n>.tmp", so that a start-up can tell a
// dead writer's file.
std::string temp_file_name();
// Whether name (temp_file_name's form) was left by a writer known to be gone: a process of this
// host and pid namespace that no longer exists. Another host's or container's file, or a name of
// another form, is not known: false.
bool temp_file_writer_is_gone(std::string_view name);

// Test hook: runs with the temporary file's path once it is written and fsynced, before its
// rename (the crash tests kill the process there).
using BeforeRename = std::function<void(const std::string& temp_path)>;

// Writes bytes to temp_dir/temp_file_name(), sets its mtime (when given), fsyncs it, renames it
// to path (creating path's directory, durably, when missing) and fsyncs path's directory. A crash
// or a power loss at any point leaves path as it was or holding every byte; once this returns
// the new file survives a power loss. On failure no temporary file is left and path is as it was
// or absent; the error names the step and the system's reason.
Result<void> write_file_durably(const std::string& temp_dir, const std::string& path, std::span<const uint8_t> bytes,
                                std::optional<int64_t> mtime_unix_s = std::nullopt,
                                const BeforeRename& before_rename = {});

}  // namespace deepinfer
