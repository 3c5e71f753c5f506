// Backend: where tensors live and how ops run (the ggml-backend idea, small). The model holds a
// Backend& and never calls kernels directly, so a device backend slots in without touching
// model code. Pointers passed to ops are this backend's memory.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "core/result.h"
#include "kernels/ops.h"
#include "weights/safetensors.h"

namespace deepinfer {

// An owning allocation in a backend's memory; freed by the backend that made it.
class DeviceBuffer {
 public:
  using Deleter = std::function<void(void*)>;
  DeviceBuffer() = default;
  DeviceBuffer(void* data, size_t size_bytes, Deleter deleter) : data_(data, deleter), size_bytes_(size_bytes) {}
  void* data() const { return data_.get(); }
  template <typename T>
  T* as() const {
    return static_cast<T*>(data_.get());
  }
  size_t size_bytes() const { return size_bytes_; }

 private:
  std::unique_ptr<void, Deleter> data_{nullptr, Deleter()};
  size_t size_bytes_ = 0;
};

// A recorded sequence of a device backend's ops (a CUDA graph): replaying it reruns them on the
// same pointers, whatever those hold at replay time. Owned by the caller; must not outlive its backend.
class CapturedGraph {
 public:
  virtual ~CapturedGraph() = default;
};

// A device's ceilings measured in the running process, for benchmarks' roofline fractions.
struct DevicePeaks {
  double copy_bytes_per_s = 0.0;         // device-to-device copy, bytes read + written
  double bf16_matmul_flop_per_s = 0.0;   // a large bf16 x bf16 -> f32 product through the backend's GEMM
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string_view name() const = 0;

  // Memory. allocate returns zero-filled memory aligned to 64 bytes.
  virtual DeviceBuffer allocate(size_t size_bytes) = 0;
  virtual void copy_to_device(void* dst, const void* src, size_t size_bytes) = 0;
  virtual void copy_to_host(void* dst, const void* src, size_t size_bytes) = 0;
  virtual void copy_on_device(void* dst, const void* src, size_t size_bytes) = 0;

  // Makes a checkpoint tensor usable by the ops. Host backends return a view into the mapped file
  // (no copy), so the WeightStore must outlive every view. Errors name the tensor and dtype.
  virtual Result<kernels::WeightView> load_weight(const TensorView& tensor) = 0;

  // Device memory still free for caches: device backends size the KV cache from it. Host backends
  // return nullopt (the engine's configured byte budget applies).
  virtual std::optional<size_t> free_memory_bytes() const { return std::nullopt; }
  // Measures the device's copy bandwidth and matrix rate (seconds of device time; benchmarks
  // only). Host backends return nullopt.
  virtual std::optional<DevicePeaks> measure_peaks() { return std::nullopt; }

  // Graph capture of a forward step (model/decode_graphs.h). Between begin_capture and end_capture
  // the ops are recorded, not run, and nothing may allocate, read back or wait (so run the same
  // ops once eagerly first: lazy set-up then happens outside the capture). Only where can_capture
  // (a device backend with graphs on); elsewhere begin_capture does nothing, the ops run eagerly
  // and end_capture returns null. replay enqueues a graph end_capture returned.
  virtual bool can_capture() const { return false; }
  virtual void begin_capture() {}
  virtual std::unique_ptr<CapturedGraph> end_capture() { return nullptr; }
  virtual void replay(const CapturedGraph& /*graph*/) {}

  // The ops of kernels/ops.h, with the same contracts.
  virtual void embedding(const kernels::WeightView& table, const int32_t* token_ids, int64_t num_tokens,
                         float* out) = 0;
  virtual void rms_norm(const float* x, const kernels::WeightView& weight, float weight_offset, int64_t num_rows,
                        int64_t dim, float eps, float* out) = 0;
  virtual void add_rms_norm(float* residual, const float* x, const kernels::WeightView& weight, float weight_offset,
                            int64_t num_rows, int64_t dim, float eps, float* out) = 0;
  virtual void rope(float* x, const int32_t* positions, int64_t num_tokens, int32_t num_heads, int32_t head_dim,
                    int32_t rotary_dim, const float* inv_freq, float attention_scaling,
                    kernels::RopeLayout layout) = 0;
  virtual void matmul(const float* x, const kernels::WeightView& w, const kernels::WeightView& bias,
                      int64_t num_rows, float* y) = 0;
  virtual void silu_mul(const float* gate, const float* up, int64_t count, float* out) = 0;
  virtual void gelu_tanh_mul(const float* gate, const float* up, int64_t count, float* out) = 0;
  virtual void add(const float* a, const float* b, int64_t count, float* out) = 0;
  virtual void scale(const float* x, int64_t count, float factor, float* out) = 0;
  virtual void softcap(const float* x, int64_t count, float cap, float* out) = 0;
  virtual void write_kv(const float* k, const float* v, const int32_t* slot_mapping, int64_t num_tokens,
                        int64_t kv_dim, float* k_cache, float* v_cache) = 0;
  virtual void paged_attention(const float* q, const float* k_cache, const float* v_cache,
                               const kernels::PagedBatch& batch, const kernels::AttentionParams& params,
                               float* out) = 0;
  // Mixture of experts and strided copies (kernels/ops.h has the contracts).
  virtual void moe_route(const float* logits, const kernels::WeightView& selection_bias, int64_t num_tokens,
                         const kernels::MoeRouting& routing, int32_t* expert_ids, float* expert_weights) = 0;
  virtual void moe_experts(const float* x, int64_t num_tokens, const int32_t* expert_ids, const float* expert_weights,
                           const kernels::MoeExperts& experts, float* workspace, int64_t* expert_token_counts,
                           float* out) = 0;
  virtual void copy_rows(const float* src, int64_t src_stride, int64_t num_rows, int64_t width, float* dst,
                         int64_t dst_stride) = 0;
};

struct BackendOptions {
  // Every op's result for a token depends only on that token's own inputs (and, for attention,
  // its sequence's cache), never on the batch's size or make-up or the thread count: a request
  // gives the same bits alone or batched. "cpu" then runs every matmul through the GEMV's
  // per-row reduction instead of oneDNN (slower prefill; docs/benchmarks.md); "ref" always is.
  bool batch_invariant = false;
  // Device backends record decode steps as graphs and replay them (CUDA graphs); false runs every
  // step op by op (--no-cuda-graphs). Host backends ignore it.
  bool graphs = true;
};

// "cpu": the optimised host kernels; "ref": the scalar reference kernels (slow; for tests).
// Unknown names are an error listing the known ones.
Result<std::unique_ptr<Backend>> make_backend(const std::string& name, const BackendOptions& options = {});

}  // namespace deepinfer
