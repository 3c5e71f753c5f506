// Read-only memory mapping with POSIX mmap.
#include "core/mapped_file.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

namespace deepinfer {

Result<std::shared_ptr<MappedFile>> MappedFile::open(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Error{"cannot open " + path + ": " + std::strerror(errno)};
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    return Error{"cannot stat " + path + ": " + std::strerror(err)};
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return Error{path + " is not a regular file"};
  }
  const auto size_bytes = static_cast<size_t>(st.st_size);
  const uint8_t* data = nullptr;
  if (size_bytes > 0) {
    void* mapped = ::mmap(nullptr, size_bytes, PROT_READ, MAP_PRIVATE, fd, 0);
    if (mapped == MAP_FAILED) {
      const int err = errno;
      ::close(fd);
      return Error{"cannot memory-map " + path + ": " + std::strerror(err)};
    }
    data = static_cast<const uint8_t*>(mapped);
  }
  ::close(fd);
  return std::shared_ptr<MappedFile>(new MappedFile(path, data, size_bytes));
}

MappedFile::~MappedFile() {
  if (data_ != nullptr) ::munmap(const_cast<uint8_t*>(data_), size_bytes_);
}

Result<std::string> read_text_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Error{"cannot open " + path + ": " + std::strerror(errno)};
  std::ostringstream os;
  os << in.rdbuf();
  if (in.bad()) return Error{"cannot read " + path};
  return os.str();
}

}  // namespace deepinfer
