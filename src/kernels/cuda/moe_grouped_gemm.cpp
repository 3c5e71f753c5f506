#include "kernels/cuda/moe_grouped_gemm.h"

#include "core/check.h"
#include "kernels/cuda/cuda_check.h"

namespace deepinfer::kernels::cuda {
namespace {

// Two problems per expert (gate and up) for up to 1024 experts, group_by_expert's limit.
constexpr int kMaxProblems = 2048;
constexpr size_t kWorkspaceBytes = size_t{32} << 20;

}  // namespace

MoeGroupedGemm::MoeGroupedGemm() {
  DI_CUBLAS_CHECK(cublasCreate(&handle_));
  DI_CUDA_CHECK(cudaMalloc(&workspace_, kWorkspaceBytes));
  const size_t bytes = size_t{kSlots} * 3 * kMaxProblems * sizeof(void*);
  DI_CUDA_CHECK(cudaMallocHost(reinterpret_cast<void**>(&host_pointers_), bytes));
  DI_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&device_pointers_), bytes));
  for (cudaEvent_t& event : uploaded_) DI_CUDA_CHECK(cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
}

MoeGroupedGemm::~MoeGroupedGemm() {
  for (cudaEvent_t event : uploaded_) {
    if (event != nullptr) cudaEventDestroy(event);
  }
  if (device_pointers_ != nullptr) cudaFree(device_pointers_);
  if (host_pointers_ != nullptr) cudaFreeHost(host_pointers_);
  if (workspace_ != nullptr) cudaFree(workspace_);
  if (handle_ != nullptr) cublasDestroy(handle_);
}

void MoeGroupedGemm::gate_up(const std::vector<ExpertPointers>& experts, const std::vector<int32_t>& offsets,
                             int64_t hidden, int64_t intermediate, DType dtype, const void* x, void* gate_up,
                             cudaStream_t stream) {
  per_expert(experts, offsets, {{&ExpertPointers::gate, 0}, {&ExpertPointers::up, intermediate}}, intermediate, hidden,
             dtype, x, gate_up, 2 * intermediate, stream);
}

void MoeGroupedGemm::down(const std::vector<ExpertPointers>& experts, const std::vector<int32_t>& offsets,
                          int64_t hidden, int64_t intermediate, DType dtype, const void* h, void* y,
                          cudaStream_t stream) {
  per_expert(experts, offsets, {{&ExpertPointers::down, 0}}, hidden, intermediate, dtype, h, y, hidden, stream);
}

void MoeGroupedGemm::per_expert(const std::vector<ExpertPointers>& experts, const std::vector<int32_t>& offsets,
                                std::initializer_list<std::pair<const void* ExpertPointers::*, int64_t>> weights,
                                int64_t n, int64_t k, DType dtype, const void* x, void* y, int64_t y_width,
                                cudaStream_t stream) {
  const size_t element = dtype_size_bytes(dtype);
  std::vector<Problem> problems;
  for (size_t e = 0; e < experts.size(); ++e) {
    const int rows = offsets[e + 1] - offsets[e];
    if (rows == 0) continue;
    const char* rows_x = static_cast<const char*>(x) + static_cast<size_t>(offsets[e] * k) * element;
    char* rows_y = static_cast<char*>(y) + static_cast<size_t>(offsets[e] * y_width) * element;
    for (const auto& [weight, column] : weights) {
      problems.push_back({experts[e].*weight, rows_x, rows_y + static_cast<size_t>(column) * element, rows,
                          static_cast<int>(n), static_cast<int>(k), static_cast<int>(k), static_cast<int>(y_width)});
    }
  }
  run(problems, dtype, stream);
}

void MoeGroupedGemm::run(const std::vector<Problem>& problems, DType dtype, cudaStream_t stream) {
  if (problems.empty()) return;
  DI_CHECK(dtype == DType::kBF16 || dtype == DType::kF16, "grouped expert GEMM on " << dtype_name(dtype) << " weights");
  const auto count = static_cast<int>(problems.size());
  DI_CHECK(count <= kMaxProblems, count << " grouped GEMM problems; at most " << kMaxProblems);
  const int slot = next_slot_;
  next_slot_ = (next_slot_ + 1) % kSlots;
  DI_CUDA_CHECK(cudaEventSynchronize(uploaded_[slot]));
  void** host = host_pointers_ + slot * 3 * kMaxProblems;
  void** device = device_pointers_ + slot * 3 * kMaxProblems;
  // Column-major view of each problem: y^T [n, rows] = w (a [k, n] column-major matrix, transposed)
  // times x^T [k, rows].
  std::vector<cublasOperation_t> trans_w(problems.size(), CUBLAS_OP_T), trans_x(problems.size(), CUBLAS_OP_N);
  std::vector<int> m(problems.size()), n(problems.size()), k(problems.size()), ld_w(problems.size()),
      ld_x(problems.size()), ld_y(problems.size()), group_size(problems.size(), 1);
  for (int i = 0; i < count; ++i) {
    const Problem& p = problems[static_cast<size_t>(i)];
    host[i] = const_cast<void*>(p.w);
    host[count + i] = const_cast<void*>(p.x);
    host[2 * count + i] = p.y;
    m[static_cast<size_t>(i)] = p.n;
    n[static_cast<size_t>(i)] = p.rows;
    k[static_cast<size_t>(i)] = p.k;
    ld_w[static_cast<size_t>(i)] = p.k;
    ld_x[static_cast<size_t>(i)] = p.ld_x;
    ld_y[static_cast<size_t>(i)] = p.ld_y;
  }
  DI_CUDA_CHECK(cudaMemcpyAsync(device, host, size_t{3} * static_cast<size_t>(count) * sizeof(void*),
                                cudaMemcpyHostToDevice, stream));
  DI_CUDA_CHECK(cudaEventRecord(uploaded_[slot], stream));
  const std::vector<float> alpha(problems.size(), 1.0f), beta(problems.size(), 0.0f);
  const cudaDataType_t type = dtype == DType::kBF16 ? CUDA_R_16BF : CUDA_R_16F;
  // cublasSetStream drops a user workspace, so it is set again after it.
  DI_CUBLAS_CHECK(cublasSetStream(handle_, stream));
  DI_CUBLAS_CHECK(cublasSetWorkspace(handle_, workspace_, kWorkspaceBytes));
  DI_CUBLAS_CHECK(cublasGemmGroupedBatchedEx(
      handle_, trans_w.data(), trans_x.data(), m.data(), n.data(), k.data(), alpha.data(),
      const_cast<const void* const*>(device), type, ld_w.data(), const_cast<const void* const*>(device + count), type,
      ld_x.data(), beta.data(), device + 2 * count, type, ld_y.data(), count, group_size.data(),
      CUBLAS_COMPUTE_32F));
}

}  // namespace deepinfer::kernels::cuda
