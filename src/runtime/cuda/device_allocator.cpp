// Size classes: multiples of 512 bytes up to 64 KiB, then four classes per power of two (at most
// 25% slack), and 2 MiB granularity above kUncachedBytes.
#include "runtime/cuda/device_allocator.h"

#include <algorithm>
#include <bit>

#include "core/check.h"
#include "core/logging.h"
#include "kernels/cuda/cuda_check.h"

namespace deepinfer {
namespace {

// Frees run from buffer destructors, where a throw ends the process. cudaFree fails only when the
// context is already broken (a kernel fault, reported where it happened), so it is logged instead.
void free_device_memory(void* p) {
  const cudaError_t status = cudaFree(p);
  if (status != cudaSuccess) DI_LOG(kError, "cudaFree failed: " << cudaGetErrorString(status));
}

}  // namespace

DeviceAllocator::~DeviceAllocator() {
  for (auto& [size, blocks] : free_) {
    for (void* p : blocks) cudaFree(p);
  }
  for (auto& [p, size] : live_) cudaFree(p);
}

size_t DeviceAllocator::size_class(size_t size_bytes) {
  if (size_bytes == 0) size_bytes = 1;
  if (size_bytes <= (size_t{64} << 10)) return (size_bytes + 511) / 512 * 512;
  if (size_bytes > kUncachedBytes) return (size_bytes + (size_t{2} << 20) - 1) / (size_t{2} << 20) * (size_t{2} << 20);
  const size_t quarter = std::bit_floor(size_bytes) / 4;
  return (size_bytes + quarter - 1) / quarter * quarter;
}

void* DeviceAllocator::allocate(size_t size_bytes) {
  const size_t size = size_class(size_bytes);
  std::lock_guard<std::mutex> lock(mutex_);
  if (auto it = free_.find(size); it != free_.end() && !it->second.empty()) {
    void* p = it->second.back();
    it->second.pop_back();
    cached_bytes_ -= size;
    hand_out(p, size);
    return p;
  }
  void* p = nullptr;
  cudaError_t status = cudaMalloc(&p, size);
  if (status == cudaErrorMemoryAllocation && cached_bytes_ > 0) {
    (void)cudaGetLastError();  // clear the sticky-free out-of-memory status before retrying
    for (auto& [cached_size, blocks] : free_) {
      for (void* block : blocks) DI_CUDA_CHECK(cudaFree(block));
    }
    free_.clear();
    cached_bytes_ = 0;
    status = cudaMalloc(&p, size);
  }
  if (status != cudaSuccess) {
    (void)cudaGetLastError();
    kernels::cuda::throw_cuda_error(status, ("cudaMalloc of " + std::to_string(size) + " bytes").c_str(), __FILE__,
                                    __LINE__);
  }
  hand_out(p, size);
  return p;
}

void DeviceAllocator::hand_out(void* p, size_t size) {
  live_.emplace(p, size);
  in_use_bytes_ += size;
  peak_in_use_bytes_ = std::max(peak_in_use_bytes_, in_use_bytes_);
}

void DeviceAllocator::deallocate(void* p) {
  if (p == nullptr) return;
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = live_.find(p);
  DI_CHECK(it != live_.end(), "deallocate of a pointer this allocator did not hand out");
  const size_t size = it->second;
  live_.erase(it);
  in_use_bytes_ -= size;
  if (size > kUncachedBytes) {
    free_device_memory(p);
    return;
  }
  free_[size].push_back(p);
  cached_bytes_ += size;
}

void DeviceAllocator::release_cached() {
  std::lock_guard<std::mutex> lock(mutex_);
  for (auto& [size, blocks] : free_) {
    for (void* p : blocks) free_device_memory(p);
  }
  free_.clear();
  cached_bytes_ = 0;
}

size_t DeviceAllocator::cached_bytes() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return cached_bytes_;
}

size_t DeviceAllocator::in_use_bytes() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return in_use_bytes_;
}

size_t DeviceAllocator::peak_in_use_bytes() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return peak_in_use_bytes_;
}

void DeviceAllocator::reset_peak() {
  std::lock_guard<std::mutex> lock(mutex_);
  peak_in_use_bytes_ = in_use_bytes_;
}

}  // namespace deepinfer
