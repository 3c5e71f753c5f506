// The CudaBackend class, shared by its two source files (dense ops; mixture of experts).
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "core/check.h"
#include "kernels/cuda/attention_front.h"
#include "kernels/cuda/copy_pieces.h"
#include "kernels/cuda/cuda_check.h"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/gemm.h"
#include "kernels/cuda/gemv_fp8.h"
#include "kernels/cuda/head_gemm.h"
#include "kernels/cuda/moe_grouped_gemm.h"
#include "kernels/cuda/moe_ops.h"
#include "runtime/backend.h"
#include "runtime/cuda/device_allocator.h"
#include "runtime/cuda/pinned_pool.h"
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
    DI_CUDA_CHECK(cudaMemsetAsync(p, 0, size_bytes, stream_.for_op()));
    return DeviceBuffer(p, size_bytes, [this](void* q) { allocator_.deallocate(q); });
  }
  // Host memory in a pinned pool is DMAed directly (cuda_pinned.cpp); anything else is staged.
  void copy_to_device(void* dst, const void* src, size_t size_bytes) override;
  // A page in a pinned pool: one scatter launch reading the slab through its mapped pointer.
  void scatter_to_device(const uint8_t* src, const std::vector<HostPiece>& pieces) override;
  void copy_to_host(void* dst, const void* src, size_t size_bytes) override;
  std::unique_ptr<PendingCopies> copy_to_host_later(const std::vector<HostCopy>& copies) override {
    DI_CHECK(!capturing_, "copy_to_host_later during graph capture");
    return readbacks_->enqueue(copies);
  }
  void copy_on_device(void* dst, const void* src, size_t size_bytes) override {
    DI_CUDA_CHECK(cudaMemcpyAsync(dst, src, size_bytes, cudaMemcpyDeviceToDevice, stream_.for_op()));
  }

  std::optional<DeviceMemory> device_memory() const override {
    DeviceMemory memory;
    DI_CUDA_CHECK(cudaMemGetInfo(&memory.free_bytes, &memory.total_bytes));
    memory.cached_bytes = allocator_.cached_bytes();
    memory.in_use_bytes = allocator_.in_use_bytes();
    memory.peak_in_use_bytes = allocator_.peak_in_use_bytes();
    return memory;
  }
  void reset_peak_memory() override { allocator_.reset_peak(); }

  std::shared_ptr<HostSlabPool> make_pinned_pool(size_t region_bytes, size_t slab_bytes) override;
  Result<kernels::WeightView> load_weight(const TensorView& tensor) override;
  // FP8 block-scaled matrices stay FP8 for matmul (kernels/cuda/gemv_fp8.h) and for experts
  // (kernels/cuda/moe_fp8.cu), MXFP4 experts stay MXFP4 (kernels/cuda/moe_mxfp4.cu), not in the
  // batch-invariant mode (whose products are cuBLASLt's and the tensor-core kernel's at every M) nor
  // with BackendOptions::packed_weights off.
  bool reads_packed_weights(DType dtype, WeightUse use) const override {
    if (!packed_weights_ || batch_invariant_) return false;
    return dtype == DType::kF8E4M3 || (dtype == DType::kMxfp4 && use == WeightUse::kExperts);
  }
  // A layout the FP8 kernels do not take (scale blocks other than 128 columns by a multiple of 16
  // rows) is dequantised to float32 here, as the loader would have. MXFP4 scales go up in the
  // device layout (kernels/cuda/moe_ops.h: mxfp4_device_scale_bytes).
  Result<kernels::WeightView> load_packed_weight(const kernels::WeightView& packed) override;
  void release_weight(const kernels::WeightView& weight) override;
  // 16-bit parts are stacked (cuda_mlp.cpp); float32 models keep separate products.
  Result<std::optional<kernels::WeightView>> load_stacked_weight(const std::vector<TensorView>& parts) override;
  Result<std::optional<kernels::WeightView>> load_stacked_packed_weight(
      const std::vector<kernels::WeightView>& parts) override;

  // CUDA graphs (cuda_graph.cpp). A capture records the stream's work; attention workspaces
  // taken under it belong to the graph, so later eager steps never hand them to anyone else.
  bool can_capture() const override { return graphs_; }
  void begin_capture() override;
  std::unique_ptr<CapturedGraph> end_capture() override;
  void replay(const CapturedGraph& graph) override;
  void begin_side_work() override;
  void end_side_work() override;
  void join_side_work() override;
  // NCCL where every rank has a GPU of its own and NCCL loads on every rank, else host copies
  // (cuda_exchange.cpp).
  Result<std::unique_ptr<DeviceExchange>> make_device_exchange(std::shared_ptr<Communicator> group,
                                                               ExchangeTransport transport) override;
  std::optional<DevicePeaks> measure_peaks() override;  // cuda_peaks.cpp
  // By default 16-bit models keep K/V in bf16 (half the bytes a decode step reads); float32 models
  // and the batch-invariant mode keep float32, whose attention is exact to the float32 fixtures.
  DType kv_cache_dtype(DType weight_dtype) const override {
    if (kv_cache_dtype_) return *kv_cache_dtype_;
    return weight_dtype != DType::kF32 && !batch_invariant_ ? DType::kBF16 : DType::kF32;
  }
  // bf16 where the FP8 kernels read the checkpoint's blocks, so an FP8 DeepSeek-V3's kv_b_proj
  // (dequantised: head_matmul reads its per-head slices) gives a bf16 latent cache and the
  // tensor-core MLA kernels, as its bf16 release does; float32 where the other projections are
  // dequantised too (other blocks, load_packed_weight; BackendOptions::packed_weights off; the
  // batch-invariant mode), so the model stays a float32 one.
  DType dequantised_fp8_dtype(int64_t block_rows, int64_t block_cols) const override {
    return reads_packed_weights(DType::kF8E4M3, WeightUse::kMatmul) && kc::fp8_blocks_supported(block_rows, block_cols)
               ? DType::kBF16
               : DType::kF32;
  }

  void embedding(const kernels::WeightView& table, const int32_t* token_ids, int64_t num_tokens, float* out) override {
    kc::embedding(table, token_ids, num_tokens, out, stream_.for_op());
  }
  // The norms write their output's rounded copy for the products that read it next: staged after
  // the op's own for_op(), so those products see the copy as current.
  void rms_norm(const float* x, const kernels::WeightView& weight, float weight_offset, int64_t num_rows, int64_t dim,
                float eps, float* out) override {
    const cudaStream_t stream = stream_.for_op();
    void* rounded = stage_for_products(out, num_rows, dim, weight.dtype);
    kc::rms_norm(x, weight, weight_offset, num_rows, dim, eps, out, stream, rounded, weight.dtype);
  }
  void layer_norm(const float* x, const kernels::WeightView& weight, const kernels::WeightView& bias, int64_t num_rows,
                  int64_t dim, float eps, float* out) override {
    kc::layer_norm(x, weight, bias, num_rows, dim, eps, out, stream_.for_op());
  }
  void add_rms_norm(float* residual, const float* x, const kernels::WeightView& weight, float weight_offset,
                    int64_t num_rows, int64_t dim, float eps, float* out) override {
    const cudaStream_t stream = stream_.for_op();
    void* rounded = stage_for_products(out, num_rows, dim, weight.dtype);
    kc::add_rms_norm(residual, x, weight, weight_offset, num_rows, dim, eps, out, stream, rounded, weight.dtype);
  }
  void rope(float* x, const int32_t* positions, int64_t num_tokens, int32_t num_heads, int32_t head_dim,
            int32_t rotary_dim, const float* inv_freq, float attention_scaling, kernels::RopeLayout layout) override {
    kc::rope(x, positions, num_tokens, num_heads, head_dim, rotary_dim, inv_freq, attention_scaling, layout, stream_.for_op());
  }
  void matmul(const float* x, const kernels::WeightView& w, const kernels::WeightView& bias, int64_t num_rows,
              float* y) override {
    gemm_.matmul(x, w, num_rows, y, stream_, bias);
  }
  // The activation in the GEMV's epilogue at decode sizes, else one GEMM, the activation rounded
  // for the down product, and down; FP8 weights past decode sizes run gate and up as two products
  // and the activation in place (cuda_mlp.cpp).
  void gated_mlp(const float* x, const kernels::WeightView& gate_up, const kernels::WeightView& down,
                 int64_t num_rows, GluActivation activation, float* scratch, float* out) override;
  // A layer's residual adds in the GEMV's epilogue at decode sizes (not in the batch-invariant mode,
  // whose products are cuBLASLt's at every M; not with BackendOptions::fused_decode off); else the
  // defaults (cuda_fused_decode.cpp). norm_matmul keeps the default: rms_norm, then the product.
  bool fuses_norm_products(int64_t num_rows, DType weight_dtype) const override;
  void matmul_add(const float* x, const kernels::WeightView& w, int64_t num_rows, float* delta,
                  float* residual) override;
  void norm_gated_mlp_add(float* residual, const NormWeights& norm, const kernels::WeightView& gate_up,
                          const kernels::WeightView& down, int64_t num_rows, GluActivation activation, float* normed,
                          float* scratch, float* delta) override;
  void silu_mul(const float* gate, const float* up, int64_t count, float* out) override {
    kc::silu_mul(gate, up, count, out, stream_.for_op());
  }
  void gelu_tanh_mul(const float* gate, const float* up, int64_t count, float* out) override {
    kc::gelu_tanh_mul(gate, up, count, out, stream_.for_op());
  }
  void gelu_mul(const float* gate, const float* up, int64_t count, float* out) override {
    kc::gelu_mul(gate, up, count, out, stream_.for_op());
  }
  void add(const float* a, const float* b, int64_t count, float* out) override {
    kc::add(a, b, count, out, stream_.for_op());
  }
  void scale(const float* x, int64_t count, float factor, float* out) override {
    kc::scale(x, count, factor, out, stream_.for_op());
  }
  void softcap(const float* x, int64_t count, float cap, float* out) override {
    kc::softcap(x, count, cap, out, stream_.for_op());
  }
  void write_kv(const float* k, const float* v, const int32_t* slot_mapping, int64_t num_tokens, int64_t kv_dim,
                DType cache_dtype, kernels::KvScales scales, void* k_cache, void* v_cache) override {
    kc::write_kv(k, v, slot_mapping, num_tokens, kv_dim, cache_dtype, scales, k_cache, v_cache, stream_.for_op());
  }
  void attention_front_end(const kernels::AttentionFrontEnd& front) override {
    kc::attention_front_end(front, stream_.for_op());
  }
  void paged_attention(const float* q, const void* k_cache, const void* v_cache, const kernels::PagedBatch& batch,
                       const kernels::AttentionParams& params, float* out) override;
  // Decode-only batches on the tensor-core decode kernel fold the front end into it (one launch
  // boundary less per layer); not with BackendOptions::fused_decode off.
  void attention_with_front_end(const kernels::AttentionFrontEnd& f, const kernels::PagedBatch& batch,
                                const kernels::AttentionParams& params, float* out) override;

  // Mixture of experts on the device (cuda_backend_moe.cpp): routing, grouping by expert and one
  // grouped launch per projection; nothing is read back but prompt-sized steps' grouping offsets
  // (grouped GEMMs, moe_step_reads_back).
  void moe_route(const float* logits, const kernels::WeightView& selection_bias, int64_t num_tokens,
                 const kernels::MoeRouting& routing, int32_t* expert_ids, float* expert_weights) override;
  void moe_experts(const float* x, int64_t num_tokens, const int32_t* expert_ids, const float* expert_weights,
                   const kernels::MoeExperts& experts, float* workspace, int64_t* expert_token_counts,
                   float* out) override;
  bool moe_step_reads_back(int64_t num_tokens, const kernels::MoeExperts& experts) override;
  // Decode-sized steps route and group in one launch (kernels/cuda/moe_ops.h: moe_route_and_group).
  void moe_route_experts(const float* logits, const kernels::WeightView& selection_bias,
                         const kernels::MoeRouting& routing, const float* x, int64_t num_tokens, int32_t* expert_ids,
                         float* expert_weights, const kernels::MoeExperts& experts, float* workspace,
                         int64_t* expert_token_counts, float* out) override;
  void moe_combine(const float* y, const int32_t* row_of_slot, const float* expert_weights, int64_t num_tokens,
                   int32_t top_k, int64_t hidden, float* out) override {
    kc::moe_combine(y, DType::kF32, row_of_slot, expert_weights, num_tokens, top_k, hidden, out, stream_.for_op());
  }
  void copy_rows(const float* src, int64_t src_stride, int64_t num_rows, int64_t width, float* dst,
                 int64_t dst_stride) override {
    kc::copy_rows(src, src_stride, num_rows, width, dst, dst_stride, stream_.for_op());
  }
  void pack_rows(const float* x, int64_t num_rows, int64_t width, DType dtype, void* out) override {
    kc::pack_rows(x, num_rows, width, dtype, out, stream_.for_op());
  }
  void unpack_rows(const void* packed, int64_t num_rows, int64_t width, DType dtype, float* out) override {
    kc::unpack_rows(packed, num_rows, width, dtype, out, stream_.for_op());
  }
  void moe_dispatch(const float* x, int64_t num_tokens, int64_t hidden, const int32_t* expert_ids, int32_t top_k,
                    const kernels::ExpertDispatch& dispatch, float* send_rows) override {
    kc::moe_dispatch(x, num_tokens, hidden, expert_ids, top_k, dispatch, send_rows, stream_.for_op());
  }
  // Prompt chunks of DeepSeek's head sizes with bf16 weights, averaging kExpandedMlaTokensPerSeq
  // new tokens per sequence or more (the expansion is paid once per visible key, the saving per
  // query and key), within the prefill workspace cap; never in the batch-invariant mode.
  bool mla_expanded_attention(const kernels::PagedBatch& batch, const kernels::MlaExpandedAttention& a) override;
  // Every head in one batched GEMM (kernels/cuda/head_gemm.h); the batch-invariant mode keeps the
  // default's per-head products on the pinned cuBLASLt algorithms.
  void head_matmul(const kernels::HeadProducts& p, float* scratch) override;
  // Sampling where the logits are (cuda_backend_sampling.cpp): only token ids leave the device.
  void sample_rows(const float* logits, int64_t vocab, const kernels::SampleParams* params, int64_t num_draws,
                   int32_t* token_ids) override;
  void gather_rows(const int32_t* src, const int32_t* row_of, int64_t num_rows, int64_t width,
                   int32_t* dst) override;

 private:
  // Where a norm writing out ([num_rows, dim]) also puts its copy rounded to dtype for the cuBLASLt
  // products that read out next; null when those run on the GEMV (which reads float32) or dtype is
  // not 16-bit (cuda_mlp.cpp).
  void* stage_for_products(const float* out, int64_t num_rows, int64_t dim, DType dtype);
  // Every host-to-device copy through the staging buffers: it may overwrite a product's input.
  void upload(void* dst, const void* src, size_t size_bytes) {
    stream_.begin_write();
    staging_->to_device(dst, src, size_bytes);
  }
  // Scratch for one op: from the allocator eagerly, from the capture's own blocks under capture.
  void* take_workspace(size_t size_bytes);
  void give_back_workspace(void* p);
  // paged_attention after its tensor-core prefill choice: the planned decode or general kernels,
  // front (when given) folded into the decode kernel.
  void planned_attention(const float* q, const void* k_cache, const void* v_cache, const kernels::PagedBatch& batch,
                         const kernels::AttentionParams& params, const kc::AttentionPlan& plan, float* out,
                         const kernels::AttentionFrontEnd* front);

  // The side work's stream and its fork and join events (Backend::begin_side_work).
  cudaStream_t main_stream_ = nullptr;
  cudaStream_t side_stream_ = nullptr;
  cudaEvent_t fork_event_ = nullptr;
  cudaEvent_t join_event_ = nullptr;
  bool side_unjoined_ = false;
  // Between begin_side_work and end_side_work: the op stream is the side stream.
  bool on_side() const { return stream_.for_products() == side_stream_; }

  bool batch_invariant_;
  std::optional<DType> kv_cache_dtype_;  // BackendOptions::kv_cache_dtype
  bool packed_weights_;
  bool graphs_;
  bool fused_decode_;
  bool capturing_ = false;
  kc::OpStream stream_;
  int num_sms_ = 0;
  DeviceAllocator allocator_;
  // Workspace of captured ops: one block serves every op of every graph, since replays run one
  // after another on the one stream and eager ops never use it, so the graphs' memory is the
  // largest workspace any captured step needs, measured by the engine's dry run (engine/memory_plan.h)
  // before the KV cache takes the rest. A capture needing more takes a bigger block; graphs
  // captured before keep their older one alive.
  std::shared_ptr<void> capture_workspace_;
  size_t capture_workspace_bytes_ = 0;
  std::vector<std::shared_ptr<void>> capture_blocks_;  // the blocks the graph being captured uses
  std::unique_ptr<PinnedStaging> staging_;
  std::unique_ptr<PinnedReadbacks> readbacks_;
  // Live pinned pools (make_pinned_pool); each removes itself when destroyed.
  PinnedPool* pinned_pool_of(const void* p, size_t size_bytes);
  std::mutex pinned_mutex_;
  std::vector<PinnedPool*> pinned_pools_;
  kc::LtGemm gemm_;
  kc::HeadGemm head_gemm_;
  std::vector<void*> weights_;  // device copies of the checkpoint (until release_weight); WeightViews point into them
  // Each MoE layer's expert pointer table on the device, keyed by the layer's host WeightView array
  // and rebuilt when its contents change (cuda_backend_moe.cpp).
  struct ExpertTable {
    std::vector<kc::ExpertPointers> host;
    DeviceBuffer device;
  };
  kc::GroupedExperts grouped_experts(const kernels::MoeExperts& experts);
  // One MoE step's plan over its workspace: the expert table, the products' kernel (or grouped
  // GEMMs), where h, y and the grouping live.
  struct MoeStep {
    int64_t num_rows = 0;
    kc::GroupedExperts grouped;
    kc::MoeKernel kernel = kc::MoeKernel::kRowwise;
    bool on_grouped_gemm = false;
    bool on_wgmma = false;      // the grouped GEMMs' kernel, where they run
    bool on_fp8_wgmma = false;  // ... or the FP8 one
    // The grouped GEMMs' operands and outputs: the weights', bf16 for packed ones, float32 outputs on
    // the FP8 kernel.
    DType gemm_dtype = DType::kBF16;
    float* h = nullptr;
    float* y = nullptr;
    kc::MoeGrouping grouping;
  };
  MoeStep moe_step(const kernels::MoeExperts& experts, const float* x, int64_t num_tokens, float* workspace);
  // Whether a step of num_rows expert rows takes the grouped GEMMs, capture aside: experts the
  // wgmma or cuBLAS grouped GEMM takes, from kGroupedGemmRowsPerExpert rows an expert.
  bool grouped_gemm_step(const kernels::MoeExperts& experts, const kc::GroupedExperts& grouped, int64_t num_rows) const;
  // The grouped products of a grouped step, then the weighted combine into out.
  void moe_products(const float* x, int64_t num_tokens, const float* expert_weights,
                    const kernels::MoeExperts& experts, const MoeStep& step, float* out);
  // moe_experts' products of prefill-sized eager steps as grouped GEMMs: reads the grouping's
  // offsets back, gathers the rows' inputs in grouped order, then on the wgmma kernel the activated
  // gate|up into step.h and down into step.y; on cuBLAS gate|up into step.h, the activation rounded
  // for down, down. h and y hold step.gemm_dtype. FP8 experts on the FP8 kernel take
  // fp8_grouped_gemms; other packed experts (MXFP4, FP8 in other blocks) run a few at a time,
  // dequantised to bf16 into a workspace of at most kPackedDequantisedBytes (one expert if larger).
  void grouped_gemm_expert_products(const float* x, const kernels::MoeExperts& experts, const MoeStep& step);
  void packed_grouped_gemms(const std::vector<int32_t>& offsets, const kernels::MoeExperts& experts,
                            const MoeStep& step, const kc::WgmmaEpilogue& activation, const void* rounded);
  // On the FP8 kernel: x quantised into the grouped rows, gate|up activated into step.h (float32),
  // h quantised, down into step.y (float32).
  void fp8_grouped_gemms(const float* x, const std::vector<int32_t>& offsets, const kernels::MoeExperts& experts,
                         const MoeStep& step);
  kc::MoeGroupedGemm moe_gemm_;
  std::map<const kernels::WeightView*, ExpertTable> expert_tables_;
  // moe_route_and_group's count of finished router blocks: zero between launches, which one stream
  // runs one at a time.
  DeviceBuffer moe_route_done_;
  // sample_rows' candidate lists, kept: at large batches they exceed the allocator's cached sizes.
  DeviceBuffer sample_workspace_;
};


}  // namespace deepinfer
