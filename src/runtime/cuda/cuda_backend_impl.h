// The CudaBackend class, shared by its two source files (dense ops; mixture of experts).
#pragma once

#include <map>
#include <memory>
#include <vector>

#include "core/check.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/gemm.h"
#include "kernels/cuda/moe_ops.h"
#include "runtime/backend.h"
#include "runtime/cuda/device_allocator.h"
#include "runtime/cuda/pinned_staging.h"

namespace deepinfer {

namespace kc = kernels::cuda;

// Fixed key split of batch-invariant attention: the reduction order then depends only on the
// sequence itself.
constexpr int32_t kInvariantSplitKeys = 512;

class CudaBackend final : public Backend {
 public:
  explicit CudaBackend(const BackendOptions& options);
  ~CudaBackend() override;

  std::string_view name() const override { return "cuda"; }

  DeviceBuffer allocate(size_t size_bytes) override {
    DI_CHECK(!capturing_, "allocate during graph capture");
    void* p = allocator_.allocate(size_bytes);
    DI_CUDA_CHECK(cudaMemsetAsync(p, 0, size_bytes, stream_));
    return DeviceBuffer(p, size_bytes, [this](void* q) { allocator_.deallocate(q); });
  }
  void copy_to_device(void* dst, const void* src, size_t size_bytes) override {
    DI_CHECK(!capturing_, "copy_to_device during graph capture");
    staging_->to_device(dst, src, size_bytes);
  }
  void copy_to_host(void* dst, const void* src, size_t size_bytes) override {
    DI_CHECK(!capturing_, "copy_to_host during graph capture");
    staging_->to_host(dst, src, size_bytes);
  }
  void copy_on_device(void* dst, const void* src, size_t size_bytes) override {
    DI_CUDA_CHECK(cudaMemcpyAsync(dst, src, size_bytes, cudaMemcpyDeviceToDevice, stream_));
  }

  std::optional<size_t> free_memory_bytes() const override {
    size_t free_bytes = 0;
    size_t total_bytes = 0;
    DI_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
    return free_bytes + allocator_.cached_bytes();
  }

  Result<kernels::WeightView> load_weight(const TensorView& tensor) override;

  // CUDA graphs (cuda_graph.cpp). A capture records the stream's work; attention workspaces
  // taken under it belong to the graph, so later eager steps never hand them to anyone else.
  bool can_capture() const override { return graphs_; }
  void begin_capture() override;
  std::unique_ptr<CapturedGraph> end_capture() override;
  void replay(const CapturedGraph& graph) override;
  std::optional<DevicePeaks> measure_peaks() override;  // cuda_peaks.cpp

  void embedding(const kernels::WeightView& table, const int32_t* token_ids, int64_t num_tokens, float* out) override {
    kc::embedding(table, token_ids, num_tokens, out, stream_);
  }
  void rms_norm(const float* x, const kernels::WeightView& weight, float weight_offset, int64_t num_rows, int64_t dim,
                float eps, float* out) override {
    kc::rms_norm(x, weight, weight_offset, num_rows, dim, eps, out, stream_);
  }
  void add_rms_norm(float* residual, const float* x, const kernels::WeightView& weight, float weight_offset,
                    int64_t num_rows, int64_t dim, float eps, float* out) override {
    kc::add_rms_norm(residual, x, weight, weight_offset, num_rows, dim, eps, out, stream_);
  }
  void rope(float* x, const int32_t* positions, int64_t num_tokens, int32_t num_heads, int32_t head_dim,
            int32_t rotary_dim, const float* inv_freq, float attention_scaling, kernels::RopeLayout layout) override {
    kc::rope(x, positions, num_tokens, num_heads, head_dim, rotary_dim, inv_freq, attention_scaling, layout, stream_);
  }
  void matmul(const float* x, const kernels::WeightView& w, const kernels::WeightView& bias, int64_t num_rows,
              float* y) override {
    gemm_.matmul(x, w, num_rows, y, stream_);
    if (bias.data != nullptr) kc::add_bias(y, bias, num_rows, stream_);
  }
  void silu_mul(const float* gate, const float* up, int64_t count, float* out) override {
    kc::silu_mul(gate, up, count, out, stream_);
  }
  void gelu_tanh_mul(const float* gate, const float* up, int64_t count, float* out) override {
    kc::gelu_tanh_mul(gate, up, count, out, stream_);
  }
  void add(const float* a, const float* b, int64_t count, float* out) override { kc::add(a, b, count, out, stream_); }
  void scale(const float* x, int64_t count, float factor, float* out) override {
    kc::scale(x, count, factor, out, stream_);
  }
  void softcap(const float* x, int64_t count, float cap, float* out) override {
    kc::softcap(x, count, cap, out, stream_);
  }
  void write_kv(const float* k, const float* v, const int32_t* slot_mapping, int64_t num_tokens, int64_t kv_dim,
                float* k_cache, float* v_cache) override {
    kc::write_kv(k, v, slot_mapping, num_tokens, kv_dim, k_cache, v_cache, stream_);
  }
  void paged_attention(const float* q, const float* k_cache, const float* v_cache, const kernels::PagedBatch& batch,
                       const kernels::AttentionParams& params, float* out) override;

  // Mixture of experts on the device (cuda_backend_moe.cpp): routing, grouping by expert and one
  // grouped launch per projection; nothing is read back.
  void moe_route(const float* logits, const kernels::WeightView& selection_bias, int64_t num_tokens,
                 const kernels::MoeRouting& routing, int32_t* expert_ids, float* expert_weights) override;
  void moe_experts(const float* x, int64_t num_tokens, const int32_t* expert_ids, const float* expert_weights,
                   const kernels::MoeExperts& experts, float* workspace, int64_t* expert_token_counts,
                   float* out) override;
  void copy_rows(const float* src, int64_t src_stride, int64_t num_rows, int64_t width, float* dst,
                 int64_t dst_stride) override {
    kc::copy_rows(src, src_stride, num_rows, width, dst, dst_stride, stream_);
  }

 private:
  // Scratch for one op: from the allocator eagerly, from the capture's own blocks under capture.
  void* take_workspace(size_t size_bytes);
  void give_back_workspace(void* p);

  bool batch_invariant_;
  bool graphs_;
  bool capturing_ = false;
  std::vector<void*> capture_blocks_;  // workspaces the graph being captured uses; moved into it
  size_t capture_block_bytes_ = 0;     // the size of capture_blocks_.back()
  cudaStream_t stream_ = nullptr;
  int num_sms_ = 0;
  DeviceAllocator allocator_;
  std::unique_ptr<PinnedStaging> staging_;
  kc::LtGemm gemm_;
  std::vector<void*> weights_;  // device copies of the checkpoint; WeightViews point into them
  // Each MoE layer's expert pointer table on the device, keyed by the layer's host WeightView array
  // and rebuilt when its contents change (cuda_backend_moe.cpp).
  struct ExpertTable {
    std::vector<kc::ExpertPointers> host;
    DeviceBuffer device;
  };
  kc::GroupedExperts grouped_experts(const kernels::MoeExperts& experts);
  std::map<const kernels::WeightView*, ExpertTable> expert_tables_;
};


}  // namespace deepinfer
