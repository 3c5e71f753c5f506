// Files compiled into the binary as byte arrays: cmake/embed_files.cmake writes each set's table
// at build time (src/CMakeLists.txt), so the server needs no files beside it and works offline.
#pragma once

#include <span>
#include <string_view>

namespace deepinfer::server {

struct EmbeddedFile {
  std::string_view path;          // relative to the set's folder, e.g. "app.js"
  std::string_view content_type;  // e.g. "text/javascript; charset=utf-8"
  std::string_view etag;          // quoted, as sent: the first 16 hex digits of the file's SHA-256
  std::string_view bytes;
};

// The web playground's files (src/server/ui).
std::span<const EmbeddedFile> playground_files();

}  // namespace deepinfer::server
