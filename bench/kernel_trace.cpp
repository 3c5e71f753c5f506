// A kernel timeline without Nsight Systems: a CUPTI injection library. Loaded by the CUDA driver
// when CUDA_INJECTION64_PATH names it, it records every kernel's start and end (graph-launched ones
// included; the concurrent-kernel activity kind does not serialise launches) and every memory copy
// (named "memcpy HtoD 123 B" and the like, grid and block 0, graph id 0 so a graph's replays are
// its kernels), and writes them at exit to the CSV file named by DEEPINFER_KERNEL_TRACE_OUT:
// start_ns,end_ns,graph_id,grid,block,name.
// tools/gpu/kernel_timeline.py turns that into a per-step table of durations and gaps.
#include <cupti.h>
#include <cxxabi.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

namespace {

constexpr size_t kBufferBytes = 8u << 20;

struct KernelRecord {
  uint64_t start;
  uint64_t end;
  uint32_t graph_id;
  int32_t grid;
  int32_t block;
  std::string name;
};

std::mutex records_mutex;
std::vector<KernelRecord> records;

void check(CUptiResult result, const char* what) {
  if (result == CUPTI_SUCCESS) return;
  const char* message = nullptr;
  cuptiGetResultString(result, &message);
  std::fprintf(stderr, "kernel trace: %s failed: %s\n", what, message != nullptr ? message : "?");
}

std::string demangled(const char* name) {
  int status = 0;
  char* readable = abi::__cxa_demangle(name, nullptr, nullptr, &status);
  std::string out = status == 0 && readable != nullptr ? readable : name;
  std::free(readable);
  return out;
}

const char* copy_kind(uint8_t kind) {
  switch (kind) {
    case CUPTI_ACTIVITY_MEMCPY_KIND_HTOD:
      return "HtoD";
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOH:
      return "DtoH";
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOD:
      return "DtoD";
    default:
      return "other";
  }
}

void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(8, kBufferBytes));
  *size = kBufferBytes;
  *max_records = 0;
}

void CUPTIAPI buffer_completed(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid_bytes) {
  CUpti_Activity* record = nullptr;
  std::vector<KernelRecord> batch;
  while (cuptiActivityGetNextRecord(buffer, valid_bytes, &record) == CUPTI_SUCCESS) {
    if (record->kind == CUPTI_ACTIVITY_KIND_MEMCPY) {
      const auto* copy = reinterpret_cast<const CUpti_ActivityMemcpy6*>(record);
      batch.push_back({copy->start, copy->end, 0, 0, 0,
                       std::string("memcpy ") + copy_kind(copy->copyKind) + " " + std::to_string(copy->bytes) + " B"});
      continue;
    }
    if (record->kind != CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL) continue;
    const auto* kernel = reinterpret_cast<const CUpti_ActivityKernel10*>(record);
    batch.push_back({kernel->start, kernel->end, kernel->graphId, kernel->gridX * kernel->gridY * kernel->gridZ,
                     kernel->blockX * kernel->blockY * kernel->blockZ, demangled(kernel->name)});
  }
  std::free(buffer);
  const std::lock_guard lock(records_mutex);
  records.insert(records.end(), batch.begin(), batch.end());
}

void write_records() {
  check(cuptiActivityFlushAll(1), "cuptiActivityFlushAll");
  const char* path = std::getenv("DEEPINFER_KERNEL_TRACE_OUT");
  if (path == nullptr) path = "kernel_trace.csv";
  std::FILE* file = std::fopen(path, "w");
  if (file == nullptr) {
    std::fprintf(stderr, "kernel trace: cannot write %s\n", path);
    return;
  }
  const std::lock_guard lock(records_mutex);
  std::fprintf(file, "start_ns,end_ns,graph_id,grid,block,name\n");
  for (const KernelRecord& r : records) {
    std::string name = r.name;
    for (char& c : name) {
      if (c == ',' || c == '"') c = ';';
    }
    std::fprintf(file, "%llu,%llu,%u,%d,%d,%s\n", static_cast<unsigned long long>(r.start),
                 static_cast<unsigned long long>(r.end), r.graph_id, r.grid, r.block, name.c_str());
  }
  std::fclose(file);
  std::fprintf(stderr, "kernel trace: %zu kernels and copies written to %s\n", records.size(), path);
}

}  // namespace

extern "C" __attribute__((visibility("default"))) int InitializeInjection() {
  check(cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed), "cuptiActivityRegisterCallbacks");
  check(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL), "cuptiActivityEnable");
  check(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMCPY), "cuptiActivityEnable(MEMCPY)");
  std::atexit(write_records);
  return 1;
}
