// Backend: where tensors live and how ops run (the ggml-backend idea, small). The model holds a
// Backend& and never calls kernels directly, so a device backend slots in without touching
// model code. Pointers passed to ops are this backend's memory.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/check.h"
#include "core/result.h"
#include "kernels/ops.h"
#include "runtime/comm/device_exchange.h"
#include "runtime/host_slab_pool.h"
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
  double read_bytes_per_s = 0.0;         // a read-only stream, bytes read
  double bf16_matmul_flop_per_s = 0.0;   // a large bf16 x bf16 -> f32 product through the backend's GEMM
};

// The activation of a gated feed-forward: SiLU (SwiGLU) or tanh-approximated GeLU (GeGLU).
struct DeviceMemory {
  size_t total_bytes = 0;
  size_t free_bytes = 0;    // free on the device now
  // Of the memory not free: blocks the backend's allocator keeps for reuse, blocks it handed out,
  // and the most it handed out at once since reset_peak_memory.
  size_t cached_bytes = 0;
  size_t in_use_bytes = 0;
  size_t peak_in_use_bytes = 0;
  // What a new cache can take without the device running short: the free memory and the cache.
  size_t available_bytes() const { return free_bytes + cached_bytes; }
};

enum class GluActivation : uint8_t { kSilu, kGeluTanh };

// An RMSNorm's weight [dim], weight offset (Gemma stores w - 1) and epsilon, as rms_norm takes them.
struct NormWeights {
  kernels::WeightView weight;
  float weight_offset = 0.0f;
  float eps = 0.0f;
};

// One product of Backend::matmul_group: y [num_rows, weight.rows] = x weight^T (+ bias).
struct MatmulOutput {
  kernels::WeightView weight;
  kernels::WeightView bias;  // data may be null
  float* y;
};

// One piece of a host-side KV page bound for a cache block: src_bytes at the page's src_offset
// go to dst, as they are when src_dtype is dst_dtype (a page in the cache's own element type), or
// read as float32 and rounded to bfloat16 (src kF32, dst kBF16).
struct HostPiece {
  void* dst;
  size_t src_offset;
  size_t src_bytes;
  DType dst_dtype;
  DType src_dtype = DType::kF32;
};

// One device-to-host copy of Backend::copy_to_host_later: size_bytes from src (this backend's
// memory) to dst (ordinary host memory).
struct HostCopy {
  void* dst;
  const void* src;
  size_t size_bytes;
};

// Copies on their way to the host (Backend::copy_to_host_later): their destinations hold the data
// once wait() returns. Must not outlive its backend.
class PendingCopies {
 public:
  virtual ~PendingCopies() = default;
  virtual void wait() = 0;
};

// Which ops read a weight: Backend::reads_packed_weights answers per use.
enum class WeightUse : uint8_t { kMatmul, kExperts };

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string_view name() const = 0;

  // Memory. allocate returns zero-filled memory aligned to 64 bytes.
  virtual DeviceBuffer allocate(size_t size_bytes) = 0;
  virtual void copy_to_device(void* dst, const void* src, size_t size_bytes) = 0;
  virtual void copy_to_host(void* dst, const void* src, size_t size_bytes) = 0;
  virtual void copy_on_device(void* dst, const void* src, size_t size_bytes) = 0;
  // Enqueues the copies behind the work enqueued before them and returns without waiting for it:
  // the host queues the next step while this one runs (a device backend; the default copies now).
  virtual std::unique_ptr<PendingCopies> copy_to_host_later(const std::vector<HostCopy>& copies);
  // Page-locked host memory for a host-side page cache (the KV store's host tier): one region of
  // about region_bytes in slabs of slab_bytes, allocated here once and freed when the last owner
  // lets go (which waits for the device: keep it for the engine's life). copy_to_device from a
  // taken slab is a DMA straight from it, still running when the call returns: the slab's bytes
  // must not change until it ends, but giving the slab back is safe (the pool hands it out again
  // only after the copy). copy_to_host into a slab lands there directly. Host backends return
  // null: their memory needs no pinning. The backend must outlive the pool.
  virtual std::shared_ptr<HostSlabPool> make_pinned_pool(size_t /*region_bytes*/, size_t /*slab_bytes*/) {
    return nullptr;
  }
  // Writes every piece of the host page at src to the device (a KV page's K and V blocks of all
  // layers). The default converts on the host and copies piece by piece; a device backend loads a
  // page that lies in one of its pinned slabs with one launch (the slab rule of make_pinned_pool holds).
  virtual void scatter_to_device(const uint8_t* src, const std::vector<HostPiece>& pieces);

  // Makes a checkpoint tensor usable by the ops. Host backends return a view into the mapped file
  // (no copy), so the WeightStore must outlive every view. Errors name the tensor and dtype.
  virtual Result<kernels::WeightView> load_weight(const TensorView& tensor) = 0;
  // Whether matmul (use kMatmul) or moe_experts (kExperts) read weights of this block-quantised
  // dtype (kF8E4M3, kMxfp4; kernels::WeightView has the layouts) as stored, dequantising inside the
  // kernels: the loader then keeps them packed (load_packed_weight) instead of dequantising them at
  // load. Host backends do unless BackendOptions::packed_weights is off; CUDA reads FP8 in matmul and
  // MXFP4 in moe_experts.
  virtual bool reads_packed_weights(DType /*dtype*/, WeightUse /*use*/) const { return false; }
  // Makes a packed weight (kernels::WeightView's block-quantised layout, its data and scales in
  // host memory that outlives the view) usable by the ops; only where reads_packed_weights. Host
  // backends use it in place.
  virtual Result<kernels::WeightView> load_packed_weight(const kernels::WeightView& packed) {
    return Error{"the " + std::string(name()) + " backend does not read packed " +
                 std::string(dtype_name(packed.dtype)) + " weights; dequantise them at load"};
  }
  // Gives back a weight load_weight made, once nothing will read it again (an expert that EPLB moved
  // to another rank): a device backend frees its copy after the work enqueued so far; host views
  // read the mapped file and need nothing.
  virtual void release_weight(const kernels::WeightView& /*weight*/) {}
  // Loads 2-D tensors of one dtype and column count as one weight, their rows stacked in order
  // (gate|up for gated_mlp), so one product reads them all. Device backends make only the stacked
  // copy; host backends return nullopt (their views read the mapped file in place, and a stacked
  // copy would double the weight's memory). Errors name the tensor that does not fit.
  virtual Result<std::optional<kernels::WeightView>> load_stacked_weight(const std::vector<TensorView>& /*parts*/) {
    return std::optional<kernels::WeightView>{};
  }
  // The same for packed FP8 parts (block-scaled views in host memory, as load_packed_weight takes,
  // but needed only during the call: a backend that stacks copies them): one operand, its scale
  // rows the parts' in order. nullopt where the backend makes none: host
  // backends, layouts its kernels do not read, and a part before the last whose rows end inside a
  // scale block (that block would straddle the next part).
  virtual Result<std::optional<kernels::WeightView>> load_stacked_packed_weight(
      const std::vector<kernels::WeightView>& /*parts*/) {
    return std::optional<kernels::WeightView>{};
  }

  // A device backend's memory, from which the engine sizes the KV cache after a dry run of its
  // worst step (engine/memory_plan.h). Host backends return nullopt (the configured budget applies).
  virtual std::optional<DeviceMemory> device_memory() const { return std::nullopt; }
  // Starts DeviceMemory::peak_in_use_bytes over from what is in use now.
  virtual void reset_peak_memory() {}
  // The element type of a KV cache for a model whose weights are weight_dtype:
  // BackendOptions::kv_cache_dtype where set, else float32 on host backends, while a device backend
  // may halve the cache's bytes for 16-bit models.
  virtual DType kv_cache_dtype(DType /*weight_dtype*/) const { return DType::kF32; }
  // The element type of an FP8 checkpoint tensor (scales in block_rows x block_cols blocks) that the
  // loader dequantises (Packing::kDequantise, or one the backend does not read packed): float32 on
  // host backends, whose packed kernels give the same numbers; a device backend that runs the
  // checkpoint's other projections on FP8 kernels may keep bf16, the type its other tensors have.
  virtual DType dequantised_fp8_dtype(int64_t /*block_rows*/, int64_t /*block_cols*/) const { return DType::kF32; }
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

  // Side work (a device backend's second stream; captured as a fork and a join). The ops enqueued
  // between begin_side_work and end_side_work start after every op enqueued before them and may
  // run beside the ops enqueued after end_side_work, until join_side_work, after which every op
  // waits for them. Side work must not read what the work beside it writes, nor write what it
  // reads, nor take op workspace. It does not nest. Host backends run every op in order.
  virtual void begin_side_work() {}
  virtual void end_side_work() {}
  virtual void join_side_work() {}

  // The row exchange of expert-parallel MoE layers on this backend's memory, one per model. A
  // collective: every rank of group calls it at the same point (model load), and the ranks settle
  // on one transport. The default, for host backends, is the group's own exchange; kNccl is
  // refused here (it needs the CUDA backend).
  virtual Result<std::unique_ptr<DeviceExchange>> make_device_exchange(std::shared_ptr<Communicator> group,
                                                                       ExchangeTransport transport);

  // The ops of kernels/ops.h, with the same contracts.
  virtual void embedding(const kernels::WeightView& table, const int32_t* token_ids, int64_t num_tokens,
                         float* out) = 0;
  virtual void rms_norm(const float* x, const kernels::WeightView& weight, float weight_offset, int64_t num_rows,
                        int64_t dim, float eps, float* out) = 0;
  virtual void layer_norm(const float* x, const kernels::WeightView& weight, const kernels::WeightView& bias,
                          int64_t num_rows, int64_t dim, float eps, float* out) = 0;
  virtual void add_rms_norm(float* residual, const float* x, const kernels::WeightView& weight, float weight_offset,
                            int64_t num_rows, int64_t dim, float eps, float* out) = 0;
  virtual void rope(float* x, const int32_t* positions, int64_t num_tokens, int32_t num_heads, int32_t head_dim,
                    int32_t rotary_dim, const float* inv_freq, float attention_scaling,
                    kernels::RopeLayout layout) = 0;
  virtual void matmul(const float* x, const kernels::WeightView& w, const kernels::WeightView& bias,
                      int64_t num_rows, float* y) = 0;
  // Products of one input with several weights (a layer's q/k/v, gate/up), each output as matmul
  // alone gives it. The CPU backend runs decode-sized ones in one parallel region (one fork/join,
  // one work queue); the default runs matmul for each.
  virtual void matmul_group(const float* x, int64_t num_rows, std::initializer_list<MatmulOutput> outputs) {
    for (const MatmulOutput& o : outputs) matmul(x, o.weight, o.bias, num_rows, o.y);
  }
  virtual void silu_mul(const float* gate, const float* up, int64_t count, float* out) = 0;
  virtual void gelu_tanh_mul(const float* gate, const float* up, int64_t count, float* out) = 0;
  virtual void gelu_mul(const float* gate, const float* up, int64_t count, float* out) = 0;
  virtual void add(const float* a, const float* b, int64_t count, float* out) = 0;
  virtual void scale(const float* x, int64_t count, float factor, float* out) = 0;
  virtual void softcap(const float* x, int64_t count, float cap, float* out) = 0;
  // The KV caches hold cache_dtype elements (kv_cache_dtype's choice; params.cache_dtype and
  // cache_scales for attention): write_kv rounds k and v to it as kernels::KvScales says,
  // paged_attention reads it.
  virtual void write_kv(const float* k, const float* v, const int32_t* slot_mapping, int64_t num_tokens, int64_t kv_dim,
                        DType cache_dtype, kernels::KvScales scales, void* k_cache, void* v_cache) = 0;
  virtual void paged_attention(const float* q, const void* k_cache, const void* v_cache,
                               const kernels::PagedBatch& batch, const kernels::AttentionParams& params,
                               float* out) = 0;
  // kernels::AttentionFrontEnd's contract. This default runs rms_norm, rope and write_kv one by one
  // (contiguous rows only); a device backend fuses them into one launch.
  virtual void attention_front_end(const kernels::AttentionFrontEnd& f) {
    const int64_t q_dim = int64_t{f.num_heads} * f.head_dim;
    const int64_t kv_dim = int64_t{f.num_kv_heads} * f.head_dim;
    DI_CHECK(f.q_stride == q_dim && f.k_stride == kv_dim && f.v_stride == kv_dim && (!f.q_out || f.q_out == f.q),
             "attention_front_end: strided rows and a separate q_out need a fused backend");
    if (f.q_norm.data != nullptr) {
      rms_norm(f.q, f.q_norm, f.norm_weight_offset, f.num_tokens * f.num_heads, f.head_dim, f.norm_eps, f.q);
      rms_norm(f.k, f.k_norm, f.norm_weight_offset, f.num_tokens * f.num_kv_heads, f.head_dim, f.norm_eps, f.k);
    }
    rope(f.q, f.positions, f.num_tokens, f.num_heads, f.head_dim, f.rotary_dim, f.inv_freq, f.attention_scaling,
         f.layout);
    rope(f.k, f.positions, f.num_tokens, f.num_kv_heads, f.head_dim, f.rotary_dim, f.inv_freq, f.attention_scaling,
         f.layout);
    write_kv(f.k, f.v, f.slot_mapping, f.num_tokens, kv_dim, f.cache_dtype, f.cache_scales, f.k_cache, f.v_cache);
  }
  // attention_front_end(f), then paged_attention over its rotated q and f's caches into out (which
  // must not overlap f's q, k or v rows). A device backend may fold the front end into the decode
  // attention kernel, with the same bits.
  virtual void attention_with_front_end(const kernels::AttentionFrontEnd& f, const kernels::PagedBatch& batch,
                                        const kernels::AttentionParams& params, float* out) {
    attention_front_end(f);
    paged_attention(f.q_out != nullptr ? f.q_out : f.q, f.k_cache, f.v_cache, batch, params, out);
  }
  // Mixture of experts and strided copies (kernels/ops.h has the contracts).
  virtual void moe_route(const float* logits, const kernels::WeightView& selection_bias, int64_t num_tokens,
                         const kernels::MoeRouting& routing, int32_t* expert_ids, float* expert_weights) = 0;
  virtual void moe_experts(const float* x, int64_t num_tokens, const int32_t* expert_ids, const float* expert_weights,
                           const kernels::MoeExperts& experts, float* workspace, int64_t* expert_token_counts,
                           float* out) = 0;
  virtual void moe_combine(const float* y, const int32_t* row_of_slot, const float* expert_weights,
                           int64_t num_tokens, int32_t top_k, int64_t hidden, float* out) = 0;
  // Whether moe_experts over num_tokens tokens reads the grouping back to the host (a device
  // backend's prompt-sized steps, on grouped GEMMs), which a captured graph cannot do: a decode
  // step with such a layer runs eagerly instead of from a graph. Not while capturing.
  virtual bool moe_step_reads_back(int64_t /*num_tokens*/, const kernels::MoeExperts& /*experts*/) { return false; }
  // moe_route into expert_ids and expert_weights ([num_tokens, top_k]), then moe_experts over them.
  // A device backend may group the routed rows by expert in the router's launch. Wrapping backends
  // (ForwardingBackend) keep this default, so they see the two calls.
  virtual void moe_route_experts(const float* logits, const kernels::WeightView& selection_bias,
                                 const kernels::MoeRouting& routing, const float* x, int64_t num_tokens,
                                 int32_t* expert_ids, float* expert_weights, const kernels::MoeExperts& experts,
                                 float* workspace, int64_t* expert_token_counts, float* out) {
    moe_route(logits, selection_bias, num_tokens, routing, expert_ids, expert_weights);
    moe_experts(x, num_tokens, expert_ids, expert_weights, experts, workspace, expert_token_counts, out);
  }
  virtual void copy_rows(const float* src, int64_t src_stride, int64_t num_rows, int64_t width, float* dst,
                         int64_t dst_stride) = 0;
  // The rows expert-parallel MoE layers exchange, in the element type of --expert-parallel-payload.
  virtual void pack_rows(const float* x, int64_t num_rows, int64_t width, DType dtype, void* out) = 0;
  virtual void unpack_rows(const void* packed, int64_t num_rows, int64_t width, DType dtype, float* out) = 0;
  // Expert parallelism's send rows, room rows per rank, planned where the routing is (kernels/ops.h).
  virtual void moe_dispatch(const float* x, int64_t num_tokens, int64_t hidden, const int32_t* expert_ids,
                            int32_t top_k, const kernels::ExpertDispatch& dispatch, float* send_rows) = 0;
  // kernels::HeadProducts' contract. The default runs matmul per head over contiguous copies in
  // scratch (num_rows * (w.cols + w.rows) floats); a device backend runs every head in one product.
  virtual void head_matmul(const kernels::HeadProducts& p, float* scratch);
  // kernels::MlaExpandedAttention's contract, when this backend takes it for this batch (true);
  // false leaves the batch to the caller's absorbed form. The default takes none: the absorbed
  // form is the host's exact path, and the expanded one pays off only on a device's tensor cores.
  virtual bool mla_expanded_attention(const kernels::PagedBatch& /*batch*/,
                                      const kernels::MlaExpandedAttention& /*a*/) {
    return false;
  }
  // One token per draw from logits rows (kernels/ops.h sample_rows); logits, params and token_ids
  // are this backend's memory. The default is the host sampler (host backends); a device backend
  // samples where the logits are, so only token ids leave it.
  virtual void sample_rows(const float* logits, int64_t vocab, const kernels::SampleParams* params,
                           int64_t num_draws, int32_t* token_ids) {
    kernels::cpu::sample_rows(logits, vocab, params, num_draws, token_ids);
  }
  // dst row r = src row row_of[r] where row_of[r] >= 0 (kernels/ops.h gather_rows): a step
  // scheduled ahead takes its input tokens from the draws of the step before it, and a step's
  // block tables are rebuilt from the last step's rows, without a round trip through the host.
  // All are this backend's memory.
  virtual void gather_rows(const int32_t* src, const int32_t* row_of, int64_t num_rows, int64_t width,
                           int32_t* dst) {
    kernels::cpu::gather_rows(src, row_of, num_rows, width, dst);
  }
  // The gated feed-forward of stacked weights: out = down(act(x gate^T) * (x up^T)) with
  // gate_up = [gate; up] ([2 * I, K], from load_stacked_weight or load_stacked_packed_weight) and
  // down [hidden, I], no biases.
  // x: [num_rows, K]; out: [num_rows, hidden]; scratch: 2 * num_rows * I floats. The default runs
  // matmul and the activation op by op; a device backend fuses the activation into the product.
  virtual void gated_mlp(const float* x, const kernels::WeightView& gate_up, const kernels::WeightView& down,
                         int64_t num_rows, GluActivation activation, float* scratch, float* out);

  // A decoder layer's norms and residual adds around its products, for a backend that folds some
  // of them into the products (the CUDA GEMV's residual-add epilogue at decode sizes):
  // fuses_norm_products says whether it does for num_rows rows and weights of weight_dtype. Each
  // op's result is that of the ops its default runs (bit for bit on a fusing backend); normed and
  // delta ([num_rows, hidden]) are scratch the unfused ops use. norm_matmul: y = rms_norm(x) w^T.
  // matmul_add: residual += x w^T. norm_gated_mlp_add: residual += gated_mlp(rms_norm(residual));
  // scratch as gated_mlp's.
  virtual bool fuses_norm_products(int64_t /*num_rows*/, DType /*weight_dtype*/) const { return false; }
  virtual void norm_matmul(const float* x, const NormWeights& norm, const kernels::WeightView& w, int64_t num_rows,
                           float* normed, float* y);
  virtual void matmul_add(const float* x, const kernels::WeightView& w, int64_t num_rows, float* delta,
                          float* residual);
  virtual void norm_gated_mlp_add(float* residual, const NormWeights& norm, const kernels::WeightView& gate_up,
                                  const kernels::WeightView& down, int64_t num_rows, GluActivation activation,
                                  float* normed, float* scratch, float* delta);
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
  // Device backends fold decode layers' residual adds into their products
  // (Backend::fuses_norm_products); false keeps the unfused op sequence (--no-fused-decode, to
  // measure one against the other). Host backends ignore it.
  bool fused_decode = true;
  // Host backends keep FP8 and MXFP4 weights packed and dequantise inside matmul
  // (Backend::reads_packed_weights); false dequantises them at load instead (twice or four times
  // the memory; to compare the two). Device backends ignore it: they dequantise at load.
  bool packed_weights = true;
  // The KV cache's element type (--kv-cache-dtype): kF32, kBF16 or kF8E4M3 (e4m3 codes with the
  // checkpoint's k/v scales, else 1: kernels::KvScales); nullopt picks the backend's default
  // (Backend::kv_cache_dtype). make_backend refuses a type the backend does not run.
  std::optional<DType> kv_cache_dtype = std::nullopt;
};

// Parses --kv-cache-dtype's values: "auto" (nullopt), "float32", "bfloat16", "fp8" / "fp8_e4m3";
// the error names the value and lists the accepted ones (callers prefix their flag's name).
Result<std::optional<DType>> parse_kv_cache_dtype(std::string_view name);

// "cpu": the optimised host kernels; "ref": the scalar reference kernels (slow; for tests).
// Unknown names are an error listing the known ones. With DEEPINFER_FAULT set, the backend is
// wrapped by the failure-injection test hook (runtime/fault_injection.h).
Result<std::unique_ptr<Backend>> make_backend(const std::string& name, const BackendOptions& options = {});

// The GPUs this process may use (0 in a build without CUDA or on a machine without a GPU): the
// launcher of local data-parallel ranks gives each rank one of them.
int32_t visible_cuda_devices();

}  // namespace deepinfer
