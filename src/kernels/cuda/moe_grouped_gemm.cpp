#include "kernels/cuda/moe_grouped_gemm.h"

#include <algorithm>
#include <cstring>

#include "core/check.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/grouped_gemm_fp8.h"

namespace deepinfer::kernels::cuda {
namespace {

// Two problems per expert (gate and up, on cuBLAS) for up to 1024 experts, group_by_expert's limit.
constexpr int kMaxProblems = 2048;
constexpr size_t kWorkspaceBytes = size_t{32} << 20;
// A slot holds the larger upload: two weight maps and a product per expert (wgmma), or three
// pointers per problem (cuBLAS).
constexpr size_t kMaxProducts = kMaxProblems / 2;
constexpr size_t kSlotBytes = kMaxProducts * (2 * sizeof(CUtensorMap) + sizeof(WgmmaProduct));
static_assert(kSlotBytes >= 3 * kMaxProblems * sizeof(void*), "a slot holds cuBLAS's pointers");
static_assert(sizeof(CUtensorMap) % alignof(WgmmaProduct) == 0, "products follow the maps aligned");

}  // namespace

MoeGroupedGemm::MoeGroupedGemm() {
  DI_CUBLAS_CHECK(cublasCreate(&handle_));
  DI_CUDA_CHECK(cudaMalloc(&workspace_, kWorkspaceBytes));
  DI_CUDA_CHECK(cudaMallocHost(reinterpret_cast<void**>(&host_slots_), kSlots * kSlotBytes));
  DI_CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&device_slots_), kSlots * kSlotBytes));
  for (cudaEvent_t& event : uploaded_) DI_CUDA_CHECK(cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
}

MoeGroupedGemm::~MoeGroupedGemm() {
  for (cudaEvent_t event : uploaded_) {
    if (event != nullptr) cudaEventDestroy(event);
  }
  if (device_slots_ != nullptr) cudaFree(device_slots_);
  if (host_slots_ != nullptr) cudaFreeHost(host_slots_);
  if (workspace_ != nullptr) cudaFree(workspace_);
  if (handle_ != nullptr) cublasDestroy(handle_);
}

bool MoeGroupedGemm::on_wgmma(DType dtype, int64_t hidden, int64_t intermediate, bool aligned) {
  return dtype == DType::kBF16 && aligned && hidden % 8 == 0 && intermediate % 8 == 0 && grouped_gemm_wgmma_supported();
}

void MoeGroupedGemm::gate_up_activated(const std::vector<ExpertPointers>& experts, const std::vector<int32_t>& offsets,
                                       int64_t hidden, int64_t intermediate, const WgmmaEpilogue& epilogue,
                                       const void* x, void* h, cudaStream_t stream, const Fp8Rows* fp8) {
  std::vector<Problem> problems = per_expert(experts, offsets, {{&ExpertPointers::gate, 0}}, intermediate, h,
                                             intermediate, fp8 != nullptr ? sizeof(float) : sizeof(uint16_t));
  for (Problem& p : problems) {
    const ExpertPointers& e = experts[static_cast<size_t>(p.expert)];
    p.w[1] = e.up;
    p.bias[0] = e.gate_bias;
    p.bias[1] = e.up_bias;
    p.scales[0] = static_cast<const float*>(e.gate_scales);
    p.scales[1] = static_cast<const float*>(e.up_scales);
  }
  WgmmaEpilogue gated = epilogue;
  gated.gated = true;
  run_wgmma(problems, gated, x, offsets.back(), hidden, stream, fp8);
}

void MoeGroupedGemm::gate_up(const std::vector<ExpertPointers>& experts, const std::vector<int32_t>& offsets,
                             int64_t hidden, int64_t intermediate, DType dtype, const void* x, void* gate_up,
                             cudaStream_t stream) {
  const std::vector<Problem> problems =
      per_expert(experts, offsets, {{&ExpertPointers::gate, 0}, {&ExpertPointers::up, intermediate}}, intermediate,
                 gate_up, 2 * intermediate, dtype_size_bytes(dtype));
  run_cublas(problems, dtype, x, hidden, stream);
}

void MoeGroupedGemm::down(const std::vector<ExpertPointers>& experts, const std::vector<int32_t>& offsets,
                          int64_t hidden, int64_t intermediate, DType dtype, const void* h, void* y,
                          cudaStream_t stream) {
  run_cublas(per_expert(experts, offsets, {{&ExpertPointers::down, 0}}, hidden, y, hidden, dtype_size_bytes(dtype)),
             dtype, h, intermediate, stream);
}

void MoeGroupedGemm::down_biased(const std::vector<ExpertPointers>& experts, const std::vector<int32_t>& offsets,
                                 int64_t hidden, int64_t intermediate, DType bias_dtype, const void* h, void* y,
                                 cudaStream_t stream, const Fp8Rows* fp8) {
  std::vector<Problem> problems = per_expert(experts, offsets, {{&ExpertPointers::down, 0}}, hidden, y, hidden,
                                             fp8 != nullptr ? sizeof(float) : sizeof(uint16_t));
  for (Problem& p : problems) {
    const ExpertPointers& e = experts[static_cast<size_t>(p.expert)];
    p.bias[0] = e.down_bias;
    p.scales[0] = static_cast<const float*>(e.down_scales);
  }
  WgmmaEpilogue epilogue;
  epilogue.bias_dtype = bias_dtype;
  run_wgmma(problems, epilogue, h, offsets.back(), intermediate, stream, fp8);
}

bool MoeGroupedGemm::on_fp8_wgmma(int64_t hidden, int64_t intermediate, int32_t scale_block_rows, bool aligned) {
  return aligned && scale_block_rows == kFp8BlockCols && hidden % kFp8BlockCols == 0 &&
         intermediate % kFp8BlockCols == 0 && grouped_gemm_wgmma_supported();
}

std::vector<MoeGroupedGemm::Problem> MoeGroupedGemm::per_expert(
    const std::vector<ExpertPointers>& experts, const std::vector<int32_t>& offsets,
    std::initializer_list<std::pair<const void* ExpertPointers::*, int64_t>> weights, int64_t n, void* y,
    int64_t y_width, size_t element) {
  std::vector<Problem> problems;
  for (size_t e = 0; e < experts.size(); ++e) {
    const int rows = offsets[e + 1] - offsets[e];
    if (rows == 0) continue;
    char* rows_y = static_cast<char*>(y) + static_cast<size_t>(offsets[e] * y_width) * element;
    for (const auto& [weight, column] : weights) {
      problems.push_back({{experts[e].*weight, nullptr}, {nullptr, nullptr}, offsets[e],
                          rows_y + static_cast<size_t>(column) * element, static_cast<int>(e), rows,
                          static_cast<int>(n), static_cast<int>(y_width)});
    }
  }
  DI_CHECK(problems.size() <= kMaxProblems, problems.size() << " grouped GEMM problems; at most " << kMaxProblems);
  return problems;
}

char* MoeGroupedGemm::begin_upload() {
  DI_CUDA_CHECK(cudaEventSynchronize(uploaded_[slot_]));
  return host_slots_ + slot_ * kSlotBytes;
}

char* MoeGroupedGemm::upload(size_t bytes, cudaStream_t stream) {
  char* device = device_slots_ + slot_ * kSlotBytes;
  DI_CUDA_CHECK(cudaMemcpyAsync(device, host_slots_ + slot_ * kSlotBytes, bytes, cudaMemcpyHostToDevice, stream));
  DI_CUDA_CHECK(cudaEventRecord(uploaded_[slot_], stream));
  slot_ = (slot_ + 1) % kSlots;
  return device;
}

void MoeGroupedGemm::run_wgmma(const std::vector<Problem>& problems, const WgmmaEpilogue& epilogue, const void* x,
                               int64_t x_rows, int64_t k, cudaStream_t stream, const Fp8Rows* fp8) {
  if (problems.empty()) return;
  const auto count = static_cast<int32_t>(problems.size());
  DI_CHECK(static_cast<size_t>(count) <= kMaxProducts, count << " grouped wgmma products; at most " << kMaxProducts);
  const DType dtype = fp8 != nullptr ? DType::kF8E4M3 : DType::kBF16;
  const int box_rows = fp8 != nullptr ? fp8_weight_box_rows(epilogue.gated) : wgmma_weight_box_rows(epilogue.gated);
  char* host = begin_upload();
  auto* maps = reinterpret_cast<CUtensorMap*>(host);
  auto* products = reinterpret_cast<WgmmaProduct*>(host + 2 * count * sizeof(CUtensorMap));
  int32_t tiles = 0;
  for (int32_t i = 0; i < count; ++i) {
    const Problem& p = problems[static_cast<size_t>(i)];
    for (int w = 0; w < (epilogue.gated ? 2 : 1); ++w) {
      auto [at, added] = weight_maps_.try_emplace({p.w[w], p.n, k, box_rows});
      if (added) at->second = wgmma_operand_map(p.w[w], p.n, k, box_rows, dtype);
      std::memcpy(&maps[2 * i + w], &at->second, sizeof(CUtensorMap));
    }
    products[i] = WgmmaProduct{tiles, static_cast<int32_t>(p.row0), p.rows, p.n, p.y, p.ld_y, {p.bias[0], p.bias[1]},
                               {p.scales[0], p.scales[1]}};
    tiles += fp8 != nullptr ? fp8_product_tiles(p.rows, p.n, epilogue.gated)
                            : wgmma_product_tiles(p.rows, p.n, epilogue.gated);
  }
  const CUtensorMap x_map = wgmma_operand_map(fp8 != nullptr ? fp8->codes : x, x_rows, k, kWgmmaTileRows, dtype);
  char* device = upload(count * (2 * sizeof(CUtensorMap) + sizeof(WgmmaProduct)), stream);
  const auto* device_maps = reinterpret_cast<const CUtensorMap*>(device);
  const auto* device_products = reinterpret_cast<const WgmmaProduct*>(device + 2 * count * sizeof(CUtensorMap));
  if (fp8 != nullptr) {
    launch_grouped_gemm_fp8(x_map, fp8->scales, x_rows, device_maps, device_products, count, tiles, k,
                            epilogue, stream);
  } else {
    launch_grouped_gemm_wgmma(x_map, device_maps, device_products, count, tiles, k, epilogue, stream);
  }
}

void MoeGroupedGemm::run_cublas(const std::vector<Problem>& problems, DType dtype, const void* x, int64_t k,
                                cudaStream_t stream) {
  if (problems.empty()) return;
  DI_CHECK(dtype == DType::kBF16 || dtype == DType::kF16, "grouped expert GEMM on " << dtype_name(dtype) << " weights");
  DI_CHECK(std::none_of(problems.begin(), problems.end(), [](const Problem& p) { return p.bias[0] != nullptr; }),
           "cuBLAS's grouped GEMM adds no biases: experts with biases need bf16 weights on a Hopper GPU");
  const auto count = static_cast<int>(problems.size());
  const size_t element = dtype_size_bytes(dtype);
  auto** host = reinterpret_cast<void**>(begin_upload());
  // Column-major view of each problem: y^T [n, rows] = w (a [k, n] column-major matrix, transposed)
  // times x^T [k, rows].
  std::vector<cublasOperation_t> trans_w(problems.size(), CUBLAS_OP_T), trans_x(problems.size(), CUBLAS_OP_N);
  std::vector<int> m(problems.size()), n(problems.size()), ks(problems.size(), static_cast<int>(k)),
      ld_y(problems.size()), group_size(problems.size(), 1);
  for (int i = 0; i < count; ++i) {
    const Problem& p = problems[static_cast<size_t>(i)];
    host[i] = const_cast<void*>(p.w[0]);
    host[count + i] = const_cast<char*>(static_cast<const char*>(x) + static_cast<size_t>(p.row0 * k) * element);
    host[2 * count + i] = p.y;
    m[static_cast<size_t>(i)] = p.n;
    n[static_cast<size_t>(i)] = p.rows;
    ld_y[static_cast<size_t>(i)] = p.ld_y;
  }
  auto** device = reinterpret_cast<void**>(upload(size_t{3} * static_cast<size_t>(count) * sizeof(void*), stream));
  const std::vector<float> alpha(problems.size(), 1.0f), beta(problems.size(), 0.0f);
  const cudaDataType_t type = dtype == DType::kBF16 ? CUDA_R_16BF : CUDA_R_16F;
  // cublasSetStream drops a user workspace, so it is set again after it.
  DI_CUBLAS_CHECK(cublasSetStream(handle_, stream));
  DI_CUBLAS_CHECK(cublasSetWorkspace(handle_, workspace_, kWorkspaceBytes));
  // ld of w and of x: both are k wide.
  DI_CUBLAS_CHECK(cublasGemmGroupedBatchedEx(
      handle_, trans_w.data(), trans_x.data(), m.data(), n.data(), ks.data(), alpha.data(),
      const_cast<const void* const*>(device), type, ks.data(), const_cast<const void* const*>(device + count), type,
      ks.data(), beta.data(), device + 2 * count, type, ld_y.data(), count, group_size.data(), CUBLAS_COMPUTE_32F));
}

}  // namespace deepinfer::kernels::cuda
