// tools/gpu/fp8_gemm_probe.cu: how fast cuBLASLt's block-scaled FP8 GEMM can run each product shape
// the engine gives it, against the algorithm its heuristic ranks first (the one the engine takes,
// kernels/cuda/gemm.cpp). The engine's configuration: e4m3 weights [N, K] with 128 x 128 float32
// scales (BLK128x128_32F), x [M, K] e4m3 with 1 x 128 scales (VEC128_32F), float32 out, 32 MiB of
// workspace. For each shape: every algorithm the heuristic returns (up to 32), median of 10 timed
// calls each after 2 warm-ups; one JSON line per shape with the first's and the best's time and
// TFLOP/s (dense FP8 peak: 1979 TFLOP/s).
// Build and run on the GPU machine (or build here and carry the binary; it needs only libcublasLt):
//   nvcc -O2 -arch=sm_90a -std=c++17 tools/gpu/fp8_gemm_probe.cu -lcublasLt -o fp8_gemm_probe
#include <cublasLt.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

namespace {

void check(int status, const char* what) {
  if (status == 0) return;
  std::fprintf(stderr, "fp8_gemm_probe: %s failed with status %d\n", what, status);
  std::exit(1);
}

struct Shape {
  const char* name;
  int64_t m, n, k;
};

float median_us(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc, cublasLtMatrixLayout_t a, cublasLtMatrixLayout_t b,
                cublasLtMatrixLayout_t c, const cublasLtMatmulAlgo_t& algo, const void* w, const void* x, float* y,
                void* workspace, size_t workspace_bytes) {
  const float alpha = 1.0f, beta = 0.0f;
  cudaEvent_t start, stop;
  check(cudaEventCreate(&start), "cudaEventCreate");
  check(cudaEventCreate(&stop), "cudaEventCreate");
  std::vector<float> times;
  for (int i = 0; i < 12; ++i) {
    check(cudaEventRecord(start), "cudaEventRecord");
    const cublasStatus_t status =
        cublasLtMatmul(handle, desc, &alpha, w, a, x, b, &beta, y, c, y, c, &algo, workspace, workspace_bytes, nullptr);
    check(cudaEventRecord(stop), "cudaEventRecord");
    check(cudaEventSynchronize(stop), "cudaEventSynchronize");
    if (status != CUBLAS_STATUS_SUCCESS) return -1.0f;
    float ms = 0.0f;
    check(cudaEventElapsedTime(&ms, start, stop), "cudaEventElapsedTime");
    if (i >= 2) times.push_back(ms * 1000.0f);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

}  // namespace

int main() {
  const Shape shapes[] = {{"square", 8192, 8192, 8192}, {"gate_4k", 4096, 14336, 4096}, {"down_4k", 4096, 4096, 14336},
                          {"q_4k", 4096, 4096, 4096},   {"gate_256", 256, 14336, 4096}, {"q_128", 128, 4096, 4096},
                          {"q_32", 32, 4096, 4096},     {"gate_32", 32, 14336, 4096}};
  cublasLtHandle_t handle;
  check(cublasLtCreate(&handle), "cublasLtCreate");
  const size_t workspace_bytes = size_t{32} << 20;
  void* workspace = nullptr;
  check(cudaMalloc(&workspace, workspace_bytes), "cudaMalloc");
  for (const Shape& s : shapes) {
    std::vector<uint8_t> codes(static_cast<size_t>(std::max(s.n, s.m) * s.k));
    uint64_t state = 88172645463325252ull;
    for (uint8_t& v : codes) {
      state ^= state << 13;
      state ^= state >> 7;
      state ^= state << 17;
      v = static_cast<uint8_t>(state & 0x7e);  // finite e4m3 codes, both signs through bit 7 below
      if (state & 0x100) v |= 0x80;
    }
    void *w, *x, *w_scales, *x_scales;
    float* y;
    check(cudaMalloc(&w, static_cast<size_t>(s.n * s.k)), "cudaMalloc");
    check(cudaMalloc(&x, static_cast<size_t>(s.m * s.k)), "cudaMalloc");
    check(cudaMalloc(&y, static_cast<size_t>(s.m * s.n) * sizeof(float)), "cudaMalloc");
    const int64_t w_scale_count = (s.n + 127) / 128 * ((s.k / 128 + 3) / 4 * 4);
    const int64_t x_scale_count = s.k / 128 * s.m;
    check(cudaMalloc(&w_scales, static_cast<size_t>(w_scale_count) * sizeof(float)), "cudaMalloc");
    check(cudaMalloc(&x_scales, static_cast<size_t>(x_scale_count) * sizeof(float)), "cudaMalloc");
    check(cudaMemcpy(w, codes.data(), static_cast<size_t>(s.n * s.k), cudaMemcpyHostToDevice), "cudaMemcpy");
    check(cudaMemcpy(x, codes.data(), static_cast<size_t>(s.m * s.k), cudaMemcpyHostToDevice), "cudaMemcpy");
    const std::vector<float> unit(static_cast<size_t>(std::max(w_scale_count, x_scale_count)), 1.0f / 448);
    check(cudaMemcpy(w_scales, unit.data(), static_cast<size_t>(w_scale_count) * sizeof(float), cudaMemcpyHostToDevice),
          "cudaMemcpy");
    check(cudaMemcpy(x_scales, unit.data(), static_cast<size_t>(x_scale_count) * sizeof(float), cudaMemcpyHostToDevice),
          "cudaMemcpy");

    cublasLtMatmulDesc_t desc;
    check(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F), "DescCreate");
    const cublasLtMatmulMatrixScale_t weight_mode = CUBLASLT_MATMUL_MATRIX_SCALE_BLK128x128_32F;
    const cublasLtMatmulMatrixScale_t x_mode = CUBLASLT_MATMUL_MATRIX_SCALE_VEC128_32F;
    check(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &weight_mode, sizeof(weight_mode)),
          "A_SCALE_MODE");
    check(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &x_mode, sizeof(x_mode)),
          "B_SCALE_MODE");
    check(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &w_scales, sizeof(w_scales)),
          "A_SCALE_POINTER");
    check(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &x_scales, sizeof(x_scales)),
          "B_SCALE_POINTER");
    const cublasOperation_t transpose = CUBLAS_OP_T, none = CUBLAS_OP_N;
    check(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &transpose, sizeof(transpose)), "TRANSA");
    check(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &none, sizeof(none)), "TRANSB");
    cublasLtMatrixLayout_t a, b, c;
    check(cublasLtMatrixLayoutCreate(&a, CUDA_R_8F_E4M3, s.k, s.n, s.k), "layout a");
    check(cublasLtMatrixLayoutCreate(&b, CUDA_R_8F_E4M3, s.k, s.m, s.k), "layout b");
    check(cublasLtMatrixLayoutCreate(&c, CUDA_R_32F, s.n, s.m, s.n), "layout c");
    cublasLtMatmulPreference_t preference;
    check(cublasLtMatmulPreferenceCreate(&preference), "PreferenceCreate");
    const uint64_t max_workspace = workspace_bytes;
    check(cublasLtMatmulPreferenceSetAttribute(preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &max_workspace,
                                               sizeof(max_workspace)),
          "PREF_MAX_WORKSPACE");
    cublasLtMatmulHeuristicResult_t results[32];
    int found = 0;
    check(cublasLtMatmulAlgoGetHeuristic(handle, desc, a, b, c, c, preference, 32, results, &found), "heuristic");
    const double flop = 2.0 * static_cast<double>(s.m) * static_cast<double>(s.n) * static_cast<double>(s.k);
    float first = -1.0f, best = -1.0f;
    int best_index = -1;
    for (int i = 0; i < found; ++i) {
      const float us = median_us(handle, desc, a, b, c, results[i].algo, w, x, y, workspace, workspace_bytes);
      if (i == 0) first = us;
      if (us > 0.0f && (best < 0.0f || us < best)) {
        best = us;
        best_index = i;
      }
    }
    std::printf(
        "{\"kind\":\"fp8_gemm_probe\",\"name\":\"%s\",\"m\":%lld,\"n\":%lld,\"k\":%lld,\"algorithms\":%d,"
        "\"first_us\":%.2f,\"best_us\":%.2f,\"best_index\":%d,\"first_tflop_s\":%.1f,\"best_tflop_s\":%.1f}\n",
        s.name, static_cast<long long>(s.m), static_cast<long long>(s.n), static_cast<long long>(s.k), found, first,
        best, best_index, first > 0 ? flop / first / 1e6 : 0.0, best > 0 ? flop / best / 1e6 : 0.0);
    std::fflush(stdout);
    cublasLtMatmulPreferenceDestroy(preference);
    cublasLtMatrixLayoutDestroy(a);
    cublasLtMatrixLayoutDestroy(b);
    cublasLtMatrixLayoutDestroy(c);
    cublasLtMatmulDescDestroy(desc);
    cudaFree(w);
    cudaFree(x);
    cudaFree(y);
    cudaFree(w_scales);
    cudaFree(x_scales);
  }
  cudaFree(workspace);
  cublasLtDestroy(handle);
  return 0;
}
