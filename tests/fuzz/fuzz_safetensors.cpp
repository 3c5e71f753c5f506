// libFuzzer target: arbitrary bytes as a safetensors file, opened as the engine opens a checkpoint
// (WeightStore::open_file: mmap, header validation). Every input either opens or returns an
// error; an opened file's tensors hold numel * element-size bytes that lie inside the file.
#include <sys/mman.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <string>

#include "weights/safetensors.h"

namespace {

// The input lives in a memory file, so each run costs no disk I/O.
struct MemoryFile {
  int fd = -1;
  std::string path;
};

const MemoryFile& input_file() {
  static const MemoryFile file = [] {
    const int fd = memfd_create("fuzz.safetensors", 0);
    if (fd < 0) std::abort();
    return MemoryFile{fd, "/proc/self/fd/" + std::to_string(fd)};
  }();
  return file;
}

volatile uint64_t g_sink = 0;

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace deepinfer;
  const MemoryFile& file = input_file();
  if (ftruncate(file.fd, 0) != 0 || pwrite(file.fd, data, size, 0) != static_cast<ssize_t>(size)) std::abort();
  auto store = WeightStore::open_file(file.path);
  if (!store.ok()) return 0;
  for (const std::string& name : store->names()) {
    const TensorView view = *store->find(name);
    if (view.numel() < 0 || view.size_bytes != static_cast<size_t>(view.numel()) * dtype_size_bytes(view.dtype)) {
      std::abort();
    }
    if (view.size_bytes > 0) {
      // Touching the first and last byte faults when the view runs past the mapping.
      const auto* bytes = static_cast<const volatile uint8_t*>(view.data);
      g_sink = g_sink + bytes[0] + bytes[view.size_bytes - 1];
    }
  }
  return 0;
}
