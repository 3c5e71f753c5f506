// tools/gpu/grouped_gemm_probe.cu: what cuBLAS offers for MoE prefill's expert products on this GPU,
// before the engine commits to a path. For the expert shapes of DeepSeek-V2-Lite and Qwen3-30B-A3B
// at a 4K prompt (bf16, float32 accumulation, bf16 out), times one cublasGemmGroupedBatchedEx call
// (one problem per expert, sizes known on the host), a loop of one cublasGemmEx per expert, and one
// dense GEMM of the same FLOPs (the ceiling); median of 10. Even split of the rows over experts,
// and a skewed one (the top 10 % of experts take half the rows). One JSON line per shape.
// Build and run on the GPU machine (or build here and carry the binary; it needs only libcublas):
//   nvcc -O2 -arch=sm_90a -std=c++17 tools/gpu/grouped_gemm_probe.cu -lcublas -o grouped_gemm_probe
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <vector>

namespace {

void check(int status, const char* what) {
  if (status == 0) return;
  std::fprintf(stderr, "grouped_gemm_probe: %s failed with status %d\n", what, status);
  std::exit(1);
}

struct Shape {
  const char* name;
  int experts;
  int rows;  // routed rows: tokens x top_k
  int n;     // output width (gate|up stacked, or hidden for down)
  int k;
  bool skewed;
};

std::vector<int> rows_per_expert(const Shape& s) {
  std::vector<int> m(static_cast<size_t>(s.experts), s.rows / s.experts);
  if (s.skewed) {
    const int hot = std::max(1, s.experts / 10);
    const int hot_rows = s.rows / 2 / hot;
    const int cold_rows = (s.rows - hot_rows * hot) / (s.experts - hot);
    for (int e = 0; e < s.experts; ++e) m[static_cast<size_t>(e)] = e < hot ? hot_rows : cold_rows;
  }
  return m;
}

template <typename Run>
float median_ms(Run&& run) {
  cudaEvent_t begin, end;
  check(cudaEventCreate(&begin), "cudaEventCreate");
  check(cudaEventCreate(&end), "cudaEventCreate");
  run();
  check(cudaDeviceSynchronize(), "warm-up");
  std::vector<float> times;
  for (int i = 0; i < 10; ++i) {
    check(cudaEventRecord(begin), "cudaEventRecord");
    run();
    check(cudaEventRecord(end), "cudaEventRecord");
    check(cudaEventSynchronize(end), "cudaEventSynchronize");
    float ms = 0.0f;
    check(cudaEventElapsedTime(&ms, begin, end), "cudaEventElapsedTime");
    times.push_back(ms);
  }
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

}  // namespace

int main() {
  cublasHandle_t handle;
  check(cublasCreate(&handle), "cublasCreate");
  void* workspace = nullptr;
  constexpr size_t kWorkspaceBytes = size_t{64} << 20;
  check(cudaMalloc(&workspace, kWorkspaceBytes), "cudaMalloc");
  check(cublasSetWorkspace(handle, workspace, kWorkspaceBytes), "cublasSetWorkspace");
  const std::vector<Shape> shapes = {
      {"deepseek-v2-lite gate|up, 4K", 64, 4096 * 6, 2 * 1408, 2048, false},
      {"deepseek-v2-lite down, 4K", 64, 4096 * 6, 2048, 1408, false},
      {"qwen3-30b-a3b gate|up, 4K", 128, 4096 * 8, 2 * 768, 2048, false},
      {"qwen3-30b-a3b down, 4K", 128, 4096 * 8, 2048, 768, false},
      {"deepseek-v2-lite gate|up, 4K, skewed", 64, 4096 * 6, 2 * 1408, 2048, true},
      {"qwen3-30b-a3b gate|up, 4K, skewed", 128, 4096 * 8, 2 * 768, 2048, true},
  };
  const float one = 1.0f;
  const float zero = 0.0f;
  for (const Shape& s : shapes) {
    const std::vector<int> m = rows_per_expert(s);
    const auto experts = static_cast<size_t>(s.experts);
    const size_t w_bytes = experts * s.n * s.k * 2;
    const size_t x_bytes = static_cast<size_t>(s.rows) * s.k * 2;
    const size_t y_bytes = static_cast<size_t>(s.rows) * s.n * 2;
    char* w = nullptr;
    char* x = nullptr;
    char* y = nullptr;
    check(cudaMalloc(&w, w_bytes), "cudaMalloc");
    check(cudaMalloc(&x, x_bytes), "cudaMalloc");
    check(cudaMalloc(&y, y_bytes), "cudaMalloc");
    check(cudaMemset(w, 0, w_bytes), "cudaMemset");
    check(cudaMemset(x, 0, x_bytes), "cudaMemset");
    // Column-major view of y_e [m_e, n] = x_e [m_e, k] @ w_e[n, k]^T: y_e^T = w_e^T(T) x_e^T.
    std::vector<const void*> a(experts), b(experts);
    std::vector<void*> c(experts);
    size_t row = 0;
    for (size_t e = 0; e < experts; ++e) {
      a[e] = w + e * s.n * s.k * 2;
      b[e] = x + row * s.k * 2;
      c[e] = y + row * s.n * 2;
      row += static_cast<size_t>(m[e]);
    }
    const void** device_a = nullptr;
    const void** device_b = nullptr;
    void** device_c = nullptr;
    check(cudaMalloc(&device_a, experts * sizeof(void*)), "cudaMalloc");
    check(cudaMalloc(&device_b, experts * sizeof(void*)), "cudaMalloc");
    check(cudaMalloc(&device_c, experts * sizeof(void*)), "cudaMalloc");
    check(cudaMemcpy(device_a, a.data(), experts * sizeof(void*), cudaMemcpyHostToDevice), "cudaMemcpy");
    check(cudaMemcpy(device_b, b.data(), experts * sizeof(void*), cudaMemcpyHostToDevice), "cudaMemcpy");
    check(cudaMemcpy(device_c, c.data(), experts * sizeof(void*), cudaMemcpyHostToDevice), "cudaMemcpy");
    const std::vector<cublasOperation_t> trans_a(experts, CUBLAS_OP_T), trans_b(experts, CUBLAS_OP_N);
    const std::vector<int> n(experts, s.n), k(experts, s.k), ld_w(experts, s.k), ld_x(experts, s.k),
        ld_y(experts, s.n), group_size(experts, 1);
    const std::vector<float> alpha(experts, 1.0f), beta(experts, 0.0f);

    const float grouped = median_ms([&] {
      check(cublasGemmGroupedBatchedEx(handle, trans_a.data(), trans_b.data(), n.data(), m.data(), k.data(),
                                       alpha.data(), device_a, CUDA_R_16BF, ld_w.data(), device_b, CUDA_R_16BF,
                                       ld_x.data(), beta.data(), device_c, CUDA_R_16BF, ld_y.data(), s.experts,
                                       group_size.data(), CUBLAS_COMPUTE_32F),
            "cublasGemmGroupedBatchedEx");
    });
    const float loop = median_ms([&] {
      for (size_t e = 0; e < experts; ++e) {
        check(cublasGemmEx(handle, CUBLAS_OP_T, CUBLAS_OP_N, s.n, m[e], s.k, &one, a[e], CUDA_R_16BF, s.k, b[e],
                           CUDA_R_16BF, s.k, &zero, c[e], CUDA_R_16BF, s.n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
              "cublasGemmEx");
      }
    });
    const float dense = median_ms([&] {
      check(cublasGemmEx(handle, CUBLAS_OP_T, CUBLAS_OP_N, s.n, s.rows, s.k, &one, w, CUDA_R_16BF, s.k, x, CUDA_R_16BF,
                         s.k, &zero, y, CUDA_R_16BF, s.n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
            "cublasGemmEx");
    });
    const double gflop = 2.0 * s.rows * s.n * s.k / 1e9;
    std::printf("{\"shape\":\"%s\",\"experts\":%d,\"rows\":%d,\"n\":%d,\"k\":%d,\"grouped_ms\":%.3f,"
                "\"grouped_tflop_s\":%.1f,\"loop_ms\":%.3f,\"loop_tflop_s\":%.1f,\"dense_ms\":%.3f,"
                "\"dense_tflop_s\":%.1f}\n",
                s.name, s.experts, s.rows, s.n, s.k, grouped, gflop / grouped, loop, gflop / loop, dense,
                gflop / dense);
    for (void* p : {static_cast<void*>(w), static_cast<void*>(x), static_cast<void*>(y), static_cast<void*>(device_a),
                    static_cast<void*>(device_b), static_cast<void*>(device_c)}) {
      check(cudaFree(p), "cudaFree");
    }
  }
  return 0;
}
