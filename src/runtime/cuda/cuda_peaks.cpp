// The device ceilings benchmarks divide by, measured in the same process: a device-to-device copy
// of 2 GiB (bytes read + written), a read-only stream over the same 2 GiB (bytes read), and an
// 8192^3 bf16 x bf16 -> f32 product through LtGemm, each the median of 10 event-timed runs after
// warm-up, on random data.
#include <algorithm>
#include <vector>

#include "runtime/cuda/cuda_backend_impl.h"

namespace deepinfer {
namespace {

constexpr int kRuns = 10;

template <typename Fn>
double median_ms(cudaStream_t stream, Fn&& run) {
  cudaEvent_t start = nullptr;
  cudaEvent_t stop = nullptr;
  DI_CUDA_CHECK(cudaEventCreate(&start));
  DI_CUDA_CHECK(cudaEventCreate(&stop));
  run();  // warm-up: plans, clocks
  run();
  std::vector<float> times;
  for (int i = 0; i < kRuns; ++i) {
    DI_CUDA_CHECK(cudaEventRecord(start, stream));
    run();
    DI_CUDA_CHECK(cudaEventRecord(stop, stream));
    DI_CUDA_CHECK(cudaEventSynchronize(stop));
    float ms = 0.0f;
    DI_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
    times.push_back(ms);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

}  // namespace

std::optional<DevicePeaks> CudaBackend::measure_peaks() {
  DevicePeaks peaks;
  {
    constexpr size_t kCopyBytes = size_t{2} << 30;
    void* src = allocator_.allocate(kCopyBytes);
    void* dst = allocator_.allocate(kCopyBytes);
    kc::fill_random(src, static_cast<int64_t>(kCopyBytes / 4), DType::kF32, 1, stream_.for_op());
    const double ms = median_ms(stream_.for_op(), [&] {
      DI_CUDA_CHECK(cudaMemcpyAsync(dst, src, kCopyBytes, cudaMemcpyDeviceToDevice, stream_.for_op()));
    });
    peaks.copy_bytes_per_s = 2.0 * static_cast<double>(kCopyBytes) / (ms * 1e-3);
    const int read_blocks = 4 * num_sms_;
    auto* sums = static_cast<float*>(allocator_.allocate(static_cast<size_t>(read_blocks) * sizeof(float)));
    const double read_ms = median_ms(stream_.for_op(), [&] {
      kc::read_stream(src, static_cast<int64_t>(kCopyBytes), sums, read_blocks, stream_.for_op());
    });
    peaks.read_bytes_per_s = static_cast<double>(kCopyBytes) / (read_ms * 1e-3);
    allocator_.deallocate(sums);
    allocator_.deallocate(src);
    allocator_.deallocate(dst);
  }
  {
    constexpr int64_t kSize = 8192;
    const size_t matrix_bytes = static_cast<size_t>(kSize * kSize) * 2;
    void* x = allocator_.allocate(matrix_bytes);
    void* w = allocator_.allocate(matrix_bytes);
    void* y = allocator_.allocate(matrix_bytes * 2);
    kc::fill_random(x, kSize * kSize, DType::kBF16, 2, stream_.for_op());
    kc::fill_random(w, kSize * kSize, DType::kBF16, 3, stream_.for_op());
    const kernels::WeightView weight{w, DType::kBF16, kSize, kSize};
    const double ms = median_ms(stream_.for_op(), [&] { gemm_.matmul_cast(x, weight, kSize, static_cast<float*>(y), stream_.for_op()); });
    peaks.bf16_matmul_flop_per_s = 2.0 * static_cast<double>(kSize) * kSize * kSize / (ms * 1e-3);
    allocator_.deallocate(x);
    allocator_.deallocate(w);
    allocator_.deallocate(y);
  }
  return peaks;
}

}  // namespace deepinfer
