// Backend ops with a portable default composed of the other ops.
#include "runtime/backend.h"

#include "core/dtype.h"

namespace deepinfer {
namespace {

class CopiedAlready final : public PendingCopies {
 public:
  void wait() override {}
};

}  // namespace

Result<std::unique_ptr<DeviceExchange>> Backend::make_device_exchange(std::shared_ptr<Communicator> group,
                                                                      ExchangeTransport transport) {
  auto agreed = agree_on_transport(
      *group, {.backend = std::string(name()),
               .requested = transport,
               .device = {},
               .nccl_unavailable = "NCCL needs --device cuda (this backend's rows are host memory)"});
  if (!agreed.ok()) return agreed.error();
  return make_host_exchange(std::move(group));
}

std::unique_ptr<PendingCopies> Backend::copy_to_host_later(const std::vector<HostCopy>& copies) {
  for (const HostCopy& copy : copies) copy_to_host(copy.dst, copy.src, copy.size_bytes);
  return std::make_unique<CopiedAlready>();
}

void Backend::gated_mlp(const float* x, const kernels::WeightView& gate_up, const kernels::WeightView& down,
                        int64_t num_rows, GluActivation activation, float* scratch, float* out) {
  const int64_t intermediate = gate_up.rows / 2;
  matmul(x, gate_up, kernels::WeightView{}, num_rows, scratch);  // [num_rows, 2 * I]: gate then up per row
  for (int64_t r = 0; r < num_rows; ++r) {
    float* row = scratch + r * 2 * intermediate;
    if (activation == GluActivation::kGeluTanh) {
      gelu_tanh_mul(row, row + intermediate, intermediate, row);
    } else {
      silu_mul(row, row + intermediate, intermediate, row);
    }
    // The activated half of each row is strided by 2 * I, so down runs row by row.
    matmul(row, down, kernels::WeightView{}, 1, out + r * down.rows);
  }
}

void Backend::head_matmul(const kernels::HeadProducts& p, float* scratch) {
  const int64_t n = p.num_rows;
  float* head_in = scratch;                  // [n, K]
  float* head_out = scratch + n * p.w.cols;  // [n, N]
  const size_t element = dtype_size_bytes(p.w.dtype);
  for (int32_t h = 0; h < p.num_heads; ++h) {
    kernels::WeightView w_h = p.w;
    w_h.data = static_cast<const char*>(p.w.data) + static_cast<size_t>(h * p.w_head_stride * p.w.cols) * element;
    copy_rows(p.x + h * p.x_head_stride, p.x_row_stride, n, p.w.cols, head_in, p.w.cols);
    matmul(head_in, w_h, kernels::WeightView{}, n, head_out);
    copy_rows(head_out, p.w.rows, n, p.w.rows, p.y + h * p.y_head_stride, p.y_row_stride);
  }
}

void Backend::norm_matmul(const float* x, const NormWeights& norm, const kernels::WeightView& w, int64_t num_rows,
                          float* normed, float* y) {
  rms_norm(x, norm.weight, norm.weight_offset, num_rows, w.cols, norm.eps, normed);
  matmul(normed, w, kernels::WeightView{}, num_rows, y);
}

void Backend::matmul_add(const float* x, const kernels::WeightView& w, int64_t num_rows, float* delta,
                         float* residual) {
  matmul(x, w, kernels::WeightView{}, num_rows, delta);
  add(residual, delta, num_rows * w.rows, residual);
}

void Backend::norm_gated_mlp_add(float* residual, const NormWeights& norm, const kernels::WeightView& gate_up,
                                 const kernels::WeightView& down, int64_t num_rows, GluActivation activation,
                                 float* normed, float* scratch, float* delta) {
  rms_norm(residual, norm.weight, norm.weight_offset, num_rows, gate_up.cols, norm.eps, normed);
  gated_mlp(normed, gate_up, down, num_rows, activation, scratch, delta);
  add(residual, delta, num_rows * down.rows, residual);
}

Result<std::optional<DType>> parse_kv_cache_dtype(std::string_view name) {
  if (name == "auto") return std::optional<DType>{};
  if (name == "float32") return std::optional<DType>{DType::kF32};
  if (name == "bfloat16") return std::optional<DType>{DType::kBF16};
  if (name == "fp8" || name == "fp8_e4m3") return std::optional<DType>{DType::kF8E4M3};
  std::string message = "'";
  message.append(name).append("' is not a KV cache dtype; expected auto, float32, bfloat16 or fp8 (fp8_e4m3)");
  return Error{message};
}

void Backend::scatter_to_device(const uint8_t* src, const std::vector<HostPiece>& pieces) {
  std::vector<uint16_t> bits;
  for (const HostPiece& piece : pieces) {
    if (piece.dst_dtype == piece.src_dtype) {
      copy_to_device(piece.dst, src + piece.src_offset, piece.src_bytes);
      continue;
    }
    DI_CHECK(piece.src_dtype == DType::kF32 && piece.dst_dtype == DType::kBF16,
             "page piece " << dtype_name(piece.src_dtype) << " into a " << dtype_name(piece.dst_dtype) << " cache");
    const auto* values = reinterpret_cast<const float*>(src + piece.src_offset);
    bits.resize(piece.src_bytes / sizeof(float));
    for (size_t i = 0; i < bits.size(); ++i) bits[i] = f32_to_bf16(values[i]);
    copy_to_device(piece.dst, bits.data(), bits.size() * sizeof(uint16_t));
  }
}

}  // namespace deepinfer
