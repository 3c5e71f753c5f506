// The two host backends: "cpu" (kernels::cpu) and "ref" (kernels::ref). Both keep weights in the
// memory-mapped checkpoint and activations in 64-byte aligned host memory.
#include <sys/mman.h>

#include <cstdlib>
#include <cstring>
#include <new>

#include "core/check.h"
#include "core/logging.h"
#include "kernels/cpu/gemv.h"
#include "kernels/cpu/matmul_invariant.h"
#include "kernels/cpu/moe.h"
#include "runtime/cpu/op_profile.h"
#include "runtime/backend.h"
#include "runtime/fault_injection.h"
#ifdef DEEPINFER_HAS_CUDA
#include "runtime/cuda/cuda_backend.h"
#endif

namespace deepinfer {
namespace {

void free_host(void* p) { std::free(p); }

// Large buffers (KV caches) come from mmap: zero pages that cost nothing until touched.
constexpr size_t kMmapThresholdBytes = size_t{2} << 20;

// The profile's name of a matmul: its shape, so a layer's projections tell apart.
std::string matmul_op_name(const kernels::WeightView& w, int64_t num_rows) {
  return "matmul m=" + std::to_string(num_rows) + " n=" + std::to_string(w.rows) + " k=" + std::to_string(w.cols) +
         " " + std::string(dtype_name(w.dtype));
}

std::string matmul_group_op_name(std::initializer_list<MatmulOutput> outputs, int64_t num_rows) {
  std::string name = "matmul_group m=" + std::to_string(num_rows) + " n=";
  for (const MatmulOutput& o : outputs) {
    if (&o != outputs.begin()) name.push_back('+');
    name.append(std::to_string(o.weight.rows));
  }
  name.append(" k=").append(std::to_string(outputs.begin()->weight.cols)).append(" ");
  return name.append(dtype_name(outputs.begin()->weight.dtype));
}

// Forwards every op but matmul to one kernel namespace; the two backends differ only in that
// namespace and in how they pick their matmul.
#define DEEPINFER_FORWARD_OPS(ns)                                                                                \
  void embedding(const kernels::WeightView& table, const int32_t* token_ids, int64_t num_tokens, float* out)     \
      override {                                                                                                 \
    OpTimer timer("embedding");                                                                                  \
    kernels::ns::embedding(table, token_ids, num_tokens, out);                                                   \
  }                                                                                                              \
  void rms_norm(const float* x, const kernels::WeightView& weight, float weight_offset, int64_t num_rows,        \
                int64_t dim, float eps, float* out) override {                                                   \
    OpTimer timer("rms_norm");                                                                                   \
    kernels::ns::rms_norm(x, weight, weight_offset, num_rows, dim, eps, out);                                    \
  }                                                                                                              \
  void add_rms_norm(float* residual, const float* x, const kernels::WeightView& weight, float weight_offset,      \
                    int64_t num_rows, int64_t dim, float eps, float* out) override {                             \
    OpTimer timer("add_rms_norm");                                                                               \
    kernels::ns::add_rms_norm(residual, x, weight, weight_offset, num_rows, dim, eps, out);                      \
  }                                                                                                              \
  void rope(float* x, const int32_t* positions, int64_t num_tokens, int32_t num_heads, int32_t head_dim,         \
            int32_t rotary_dim, const float* inv_freq, float attention_scaling, kernels::RopeLayout layout)      \
      override {                                                                                                 \
    OpTimer timer("rope");                                                                                       \
    kernels::ns::rope(x, positions, num_tokens, num_heads, head_dim, rotary_dim, inv_freq, attention_scaling,    \
                      layout);                                                                                   \
  }                                                                                                              \
  void silu_mul(const float* gate, const float* up, int64_t count, float* out) override {                        \
    OpTimer timer("silu_mul");                                                                                   \
    kernels::ns::silu_mul(gate, up, count, out);                                                                 \
  }                                                                                                              \
  void gelu_tanh_mul(const float* gate, const float* up, int64_t count, float* out) override {                   \
    OpTimer timer("gelu_tanh_mul");                                                                              \
    kernels::ns::gelu_tanh_mul(gate, up, count, out);                                                            \
  }                                                                                                              \
  void gelu_mul(const float* gate, const float* up, int64_t count, float* out) override {                        \
    OpTimer timer("gelu_mul");                                                                                   \
    kernels::ns::gelu_mul(gate, up, count, out);                                                                 \
  }                                                                                                              \
  void add(const float* a, const float* b, int64_t count, float* out) override {                                 \
    OpTimer timer("add");                                                                                        \
    kernels::ns::add(a, b, count, out);                                                                          \
  }                                                                                                              \
  void scale(const float* x, int64_t count, float factor, float* out) override {                                 \
    OpTimer timer("scale");                                                                                      \
    kernels::ns::scale(x, count, factor, out);                                                                   \
  }                                                                                                              \
  void softcap(const float* x, int64_t count, float cap, float* out) override {                                  \
    OpTimer timer("softcap");                                                                                    \
    kernels::ns::softcap(x, count, cap, out);                                                                    \
  }                                                                                                              \
  void write_kv(const float* k, const float* v, const int32_t* slot_mapping, int64_t num_tokens, int64_t kv_dim, \
                DType cache_dtype, kernels::KvScales scales, void* k_cache, void* v_cache) override {            \
    OpTimer timer("write_kv");                                                                                   \
    kernels::ns::write_kv(k, v, slot_mapping, num_tokens, kv_dim, cache_dtype, scales, k_cache, v_cache);       \
  }                                                                                                              \
  void paged_attention(const float* q, const void* k_cache, const void* v_cache,                                 \
                       const kernels::PagedBatch& batch, const kernels::AttentionParams& params, float* out)     \
      override {                                                                                                 \
    OpTimer timer("paged_attention");                                                                            \
    kernels::ns::paged_attention(q, k_cache, v_cache, batch, params, out);                                       \
  }                                                                                                              \
  void layer_norm(const float* x, const kernels::WeightView& weight, const kernels::WeightView& bias,            \
                  int64_t num_rows, int64_t dim, float eps, float* out) override {                               \
    OpTimer timer("layer_norm");                                                                                 \
    kernels::ns::layer_norm(x, weight, bias, num_rows, dim, eps, out);                                           \
  }                                                                                                              \
  void pack_rows(const float* x, int64_t num_rows, int64_t width, DType dtype, void* out) override {             \
    OpTimer timer("pack_rows");                                                                                  \
    kernels::ns::pack_rows(x, num_rows, width, dtype, out);                                                      \
  }                                                                                                              \
  void unpack_rows(const void* packed, int64_t num_rows, int64_t width, DType dtype, float* out) override {      \
    OpTimer timer("unpack_rows");                                                                                \
    kernels::ns::unpack_rows(packed, num_rows, width, dtype, out);                                               \
  }                                                                                                              \
  void moe_dispatch(const float* x, int64_t num_tokens, int64_t hidden, const int32_t* expert_ids, int32_t top_k, \
                    const kernels::ExpertDispatch& dispatch, float* send_rows) override {                        \
    OpTimer timer("moe_dispatch");                                                                               \
    kernels::ns::moe_dispatch(x, num_tokens, hidden, expert_ids, top_k, dispatch, send_rows);                    \
  }

class HostBackendBase : public Backend {
 public:
  explicit HostBackendBase(const BackendOptions& options)
      : packed_weights_(options.packed_weights), kv_cache_dtype_(options.kv_cache_dtype.value_or(DType::kF32)) {}
  DeviceBuffer allocate(size_t size_bytes) override {
    if (size_bytes >= kMmapThresholdBytes) {
      void* p = ::mmap(nullptr, size_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
      if (p == MAP_FAILED) throw std::bad_alloc();
      return DeviceBuffer(p, size_bytes, [size_bytes](void* q) { ::munmap(q, size_bytes); });
    }
    const size_t rounded = (size_bytes + 63) / 64 * 64;
    void* p = std::aligned_alloc(64, rounded == 0 ? 64 : rounded);
    if (p == nullptr) throw std::bad_alloc();
    std::memset(p, 0, rounded);
    return DeviceBuffer(p, size_bytes, &free_host);
  }
  void copy_to_device(void* dst, const void* src, size_t size_bytes) override { std::memcpy(dst, src, size_bytes); }
  void copy_to_host(void* dst, const void* src, size_t size_bytes) override { std::memcpy(dst, src, size_bytes); }
  void copy_on_device(void* dst, const void* src, size_t size_bytes) override { std::memcpy(dst, src, size_bytes); }

  Result<kernels::WeightView> load_weight(const TensorView& tensor) override {
    if (tensor.dtype != DType::kF32 && tensor.dtype != DType::kBF16 && tensor.dtype != DType::kF16) {
      return Error{"tensor " + tensor.name + " in " + tensor.file + " has dtype " +
                   std::string(dtype_name(tensor.dtype)) + "; the CPU backend takes F32, BF16 or F16 weights"};
    }
    if (tensor.shape.empty() || tensor.shape.size() > 2) {
      return Error{"tensor " + tensor.name + " in " + tensor.file + " has shape " + shape_to_string(tensor.shape) +
                   "; expected a vector or a matrix"};
    }
    kernels::WeightView view;
    view.data = tensor.data;
    view.dtype = tensor.dtype;
    view.rows = tensor.shape.size() == 2 ? tensor.shape[0] : 1;
    view.cols = tensor.shape.back();
    return view;
  }
  bool reads_packed_weights(DType dtype, WeightUse /*use*/) const override {
    return packed_weights_ && (dtype == DType::kF8E4M3 || dtype == DType::kMxfp4);
  }
  Result<kernels::WeightView> load_packed_weight(const kernels::WeightView& packed) override {
    if (!reads_packed_weights(packed.dtype, WeightUse::kMatmul) || packed.scales == nullptr)
      return Backend::load_packed_weight(packed);
    return packed;
  }
  // Every element type of kernels::KvScales; batch invariant whichever.
  DType kv_cache_dtype(DType /*weight_dtype*/) const override { return kv_cache_dtype_; }

 private:
  bool packed_weights_;
  DType kv_cache_dtype_;
};

class CpuBackend final : public HostBackendBase {
 public:
  explicit CpuBackend(const BackendOptions& options)
      : HostBackendBase(options), batch_invariant_(options.batch_invariant) {}
  std::string_view name() const override { return "cpu"; }
  DEEPINFER_FORWARD_OPS(cpu)
  // The other CPU ops are batch invariant as they are; the default matmul is not (GEMV for a
  // few rows, oneDNN beyond).
  void matmul(const float* x, const kernels::WeightView& w, const kernels::WeightView& bias, int64_t num_rows,
              float* y) override {
    OpTimer timer([&] { return matmul_op_name(w, num_rows); },
                  kernels::weight_bytes(w));
    if (batch_invariant_) {
      kernels::cpu::matmul_invariant(x, w, bias, num_rows, y);
    } else {
      kernels::cpu::matmul(x, w, bias, num_rows, y);
    }
  }
  void matmul_group(const float* x, int64_t num_rows, std::initializer_list<MatmulOutput> outputs) override {
    kernels::cpu::MatmulTarget targets[kernels::cpu::kMaxGroupOutputs];
    int num_targets = 0;
    for (const MatmulOutput& o : outputs) {
      if (num_targets == kernels::cpu::kMaxGroupOutputs) break;
      targets[num_targets++] = kernels::cpu::MatmulTarget{o.weight, o.bias, o.y};
    }
    const auto size = static_cast<int>(outputs.size());
    if (size != num_targets || !kernels::cpu::can_matmul_group(targets, num_targets, num_rows)) {
      Backend::matmul_group(x, num_rows, outputs);
      return;
    }
    int64_t bytes = 0;
    for (const MatmulOutput& o : outputs) {
      bytes += kernels::weight_bytes(o.weight);
    }
    OpTimer timer([&] { return matmul_group_op_name(outputs, num_rows); }, bytes);
    kernels::cpu::matmul_group(x, num_rows, targets, num_targets);
  }
  void moe_route(const float* logits, const kernels::WeightView& selection_bias, int64_t num_tokens,
                 const kernels::MoeRouting& routing, int32_t* expert_ids, float* expert_weights) override {
    kernels::cpu::moe_route(logits, selection_bias, num_tokens, routing, expert_ids, expert_weights);
  }
  void moe_experts(const float* x, int64_t num_tokens, const int32_t* expert_ids, const float* expert_weights,
                   const kernels::MoeExperts& experts, float* workspace, int64_t* expert_token_counts,
                   float* out) override {
    if (batch_invariant_) {
      kernels::cpu::moe_experts_invariant(x, num_tokens, expert_ids, expert_weights, experts, workspace,
                                          expert_token_counts, out);
    } else {
      kernels::cpu::moe_experts(x, num_tokens, expert_ids, expert_weights, experts, workspace, expert_token_counts,
                                out);
    }
  }
  void moe_combine(const float* y, const int32_t* row_of_slot, const float* expert_weights, int64_t num_tokens,
                   int32_t top_k, int64_t hidden, float* out) override {
    kernels::cpu::moe_combine(y, row_of_slot, expert_weights, num_tokens, top_k, hidden, out);
  }
  void copy_rows(const float* src, int64_t src_stride, int64_t num_rows, int64_t width, float* dst,
                 int64_t dst_stride) override {
    kernels::cpu::copy_rows(src, src_stride, num_rows, width, dst, dst_stride);
  }

 private:
  bool batch_invariant_;
};

// Scalar loops, one row at a time: batch invariant whatever the options.
class RefBackend final : public HostBackendBase {
 public:
  explicit RefBackend(const BackendOptions& options) : HostBackendBase(options) {}
  std::string_view name() const override { return "ref"; }
  DEEPINFER_FORWARD_OPS(ref)
  void matmul(const float* x, const kernels::WeightView& w, const kernels::WeightView& bias, int64_t num_rows,
              float* y) override {
    kernels::ref::matmul(x, w, bias, num_rows, y);
  }
  void moe_route(const float* logits, const kernels::WeightView& selection_bias, int64_t num_tokens,
                 const kernels::MoeRouting& routing, int32_t* expert_ids, float* expert_weights) override {
    kernels::ref::moe_route(logits, selection_bias, num_tokens, routing, expert_ids, expert_weights);
  }
  void moe_experts(const float* x, int64_t num_tokens, const int32_t* expert_ids, const float* expert_weights,
                   const kernels::MoeExperts& experts, float* workspace, int64_t* expert_token_counts,
                   float* out) override {
    kernels::ref::moe_experts(x, num_tokens, expert_ids, expert_weights, experts, workspace, expert_token_counts, out);
  }
  void moe_combine(const float* y, const int32_t* row_of_slot, const float* expert_weights, int64_t num_tokens,
                   int32_t top_k, int64_t hidden, float* out) override {
    kernels::ref::moe_combine(y, row_of_slot, expert_weights, num_tokens, top_k, hidden, out);
  }
  void copy_rows(const float* src, int64_t src_stride, int64_t num_rows, int64_t width, float* dst,
                 int64_t dst_stride) override {
    kernels::ref::copy_rows(src, src_stride, num_rows, width, dst, dst_stride);
  }
};

#undef DEEPINFER_FORWARD_OPS

Result<std::unique_ptr<Backend>> make_named_backend(const std::string& name, const BackendOptions& options) {
  if (name == "cpu") return std::unique_ptr<Backend>(std::make_unique<CpuBackend>(options));
  if (name == "ref") return std::unique_ptr<Backend>(std::make_unique<RefBackend>(options));
#ifdef DEEPINFER_HAS_CUDA
  if (name == "cuda") return make_cuda_backend(options);
  return Error{"unknown device '" + name + "'; this build supports: cpu, ref, cuda"};
#else
  return Error{"unknown device '" + name + "'; this build supports: cpu, ref (cuda needs a build with nvcc)"};
#endif
}

}  // namespace

int32_t visible_cuda_devices() {
#ifdef DEEPINFER_HAS_CUDA
  return count_cuda_devices();
#else
  return 0;
#endif
}

Result<std::unique_ptr<Backend>> make_backend(const std::string& name, const BackendOptions& options) {
  if (const std::optional<DType> dtype = options.kv_cache_dtype;
      dtype && *dtype != DType::kF32 && *dtype != DType::kBF16 && *dtype != DType::kF8E4M3) {
    return Error{"kv_cache_dtype " + std::string(dtype_name(*dtype)) +
                 " is not a KV cache dtype (float32, bfloat16 or fp8)"};
  }
  auto backend = make_named_backend(name, options);
  const char* fault = std::getenv("DEEPINFER_FAULT");
  if (!backend.ok() || fault == nullptr || fault[0] == '\0') return backend;
  auto spec = parse_fault_spec(fault);
  if (!spec.ok()) return spec.error();
  auto faults = std::make_shared<FaultSwitch>();
  faults->arm(*spec);
  DI_LOG(kWarn, "DEEPINFER_FAULT=" << fault << " (a test hook): that backend call will fail");
  return wrap_with_faults(std::move(*backend), std::move(faults));
}

}  // namespace deepinfer
