// The two host backends: "cpu" (kernels::cpu) and "ref" (kernels::ref). Both keep weights in the
// memory-mapped checkpoint and activations in 64-byte aligned host memory.
#include <sys/mman.h>

#include <cstdlib>
#include <cstring>
#include <new>

#include "kernels/cpu/matmul_invariant.h"
#include "kernels/cpu/moe.h"
#include "runtime/backend.h"
#ifdef DEEPINFER_HAS_CUDA
#include "runtime/cuda/cuda_backend.h"
#endif

namespace deepinfer {
namespace {

void free_host(void* p) { std::free(p); }

// Large buffers (KV caches) come from mmap: zero pages that cost nothing until touched.
constexpr size_t kMmapThresholdBytes = size_t{2} << 20;

// Forwards every op but matmul to one kernel namespace; the two backends differ only in that
// namespace and in how they pick their matmul.
#define DEEPINFER_FORWARD_OPS(ns)                                                                                \
  void embedding(const kernels::WeightView& table, const int32_t* token_ids, int64_t num_tokens, float* out)     \
      override {                                                                                                 \
    kernels::ns::embedding(table, token_ids, num_tokens, out);                                                   \
  }                                                                                                              \
  void rms_norm(const float* x, const kernels::WeightView& weight, float weight_offset, int64_t num_rows,        \
                int64_t dim, float eps, float* out) override {                                                   \
    kernels::ns::rms_norm(x, weight, weight_offset, num_rows, dim, eps, out);                                    \
  }                                                                                                              \
  void add_rms_norm(float* residual, const float* x, const kernels::WeightView& weight, float weight_offset,      \
                    int64_t num_rows, int64_t dim, float eps, float* out) override {                             \
    kernels::ns::add_rms_norm(residual, x, weight, weight_offset, num_rows, dim, eps, out);                      \
  }                                                                                                              \
  void rope(float* x, const int32_t* positions, int64_t num_tokens, int32_t num_heads, int32_t head_dim,         \
            int32_t rotary_dim, const float* inv_freq, float attention_scaling, kernels::RopeLayout layout)      \
      override {                                                                                                 \
    kernels::ns::rope(x, positions, num_tokens, num_heads, head_dim, rotary_dim, inv_freq, attention_scaling,    \
                      layout);                                                                                   \
  }                                                                                                              \
  void silu_mul(const float* gate, const float* up, int64_t count, float* out) override {                        \
    kernels::ns::silu_mul(gate, up, count, out);                                                                 \
  }                                                                                                              \
  void gelu_tanh_mul(const float* gate, const float* up, int64_t count, float* out) override {                   \
    kernels::ns::gelu_tanh_mul(gate, up, count, out);                                                            \
  }                                                                                                              \
  void add(const float* a, const float* b, int64_t count, float* out) override {                                 \
    kernels::ns::add(a, b, count, out);                                                                          \
  }                                                                                                              \
  void scale(const float* x, int64_t count, float factor, float* out) override {                                 \
    kernels::ns::scale(x, count, factor, out);                                                                   \
  }                                                                                                              \
  void softcap(const float* x, int64_t count, float cap, float* out) override {                                  \
    kernels::ns::softcap(x, count, cap, out);                                                                    \
  }                                                                                                              \
  void write_kv(const float* k, const float* v, const int32_t* slot_mapping, int64_t num_tokens, int64_t kv_dim, \
                float* k_cache, float* v_cache) override {                                                       \
    kernels::ns::write_kv(k, v, slot_mapping, num_tokens, kv_dim, k_cache, v_cache);                             \
  }                                                                                                              \
  void paged_attention(const float* q, const float* k_cache, const float* v_cache,                               \
                       const kernels::PagedBatch& batch, const kernels::AttentionParams& params, float* out)     \
      override {                                                                                                 \
    kernels::ns::paged_attention(q, k_cache, v_cache, batch, params, out);                                       \
  }

class HostBackendBase : public Backend {
 public:
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
};

class CpuBackend final : public HostBackendBase {
 public:
  explicit CpuBackend(const BackendOptions& options) : batch_invariant_(options.batch_invariant) {}
  std::string_view name() const override { return "cpu"; }
  DEEPINFER_FORWARD_OPS(cpu)
  // The other CPU ops are batch invariant as they are; the default matmul is not (GEMV for a
  // few rows, oneDNN beyond).
  void matmul(const float* x, const kernels::WeightView& w, const kernels::WeightView& bias, int64_t num_rows,
              float* y) override {
    if (batch_invariant_) {
      kernels::cpu::matmul_invariant(x, w, bias, num_rows, y);
    } else {
      kernels::cpu::matmul(x, w, bias, num_rows, y);
    }
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
  void copy_rows(const float* src, int64_t src_stride, int64_t num_rows, int64_t width, float* dst,
                 int64_t dst_stride) override {
    kernels::ref::copy_rows(src, src_stride, num_rows, width, dst, dst_stride);
  }
};

#undef DEEPINFER_FORWARD_OPS

}  // namespace

Result<std::unique_ptr<Backend>> make_backend(const std::string& name, const BackendOptions& options) {
  if (name == "cpu") return std::unique_ptr<Backend>(std::make_unique<CpuBackend>(options));
  if (name == "ref") return std::unique_ptr<Backend>(std::make_unique<RefBackend>());
#ifdef DEEPINFER_HAS_CUDA
  if (name == "cuda") return make_cuda_backend(options);
  return Error{"unknown device '" + name + "'; this build supports: cpu, ref, cuda"};
#else
  return Error{"unknown device '" + name + "'; this build supports: cpu, ref (cuda needs a build with nvcc)"};
#endif
}

}  // namespace deepinfer
