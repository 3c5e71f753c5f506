// A Backend that passes every call to another one: the base of test wrappers that watch or
// change some calls (fault injection, perturbed ops in negative controls) and forward the rest.
#pragma once

#include <memory>
#include <string_view>
#include <utility>
#include <vector>

#include "runtime/backend.h"

namespace deepinfer {

class ForwardingBackend : public Backend {
 public:
  explicit ForwardingBackend(std::unique_ptr<Backend> inner) : inner_(std::move(inner)) {}

  // Called with the method's name before every call that may run on the device.
  virtual void on_call(std::string_view /*op*/) {}

  std::string_view name() const override { return inner_->name(); }

  DeviceBuffer allocate(size_t size_bytes) override {
    on_call("allocate");
    return inner_->allocate(size_bytes);
  }
  void copy_to_device(void* dst, const void* src, size_t size_bytes) override {
    on_call("copy_to_device");
    inner_->copy_to_device(dst, src, size_bytes);
  }
  void copy_to_host(void* dst, const void* src, size_t size_bytes) override {
    on_call("copy_to_host");
    inner_->copy_to_host(dst, src, size_bytes);
  }
  void copy_on_device(void* dst, const void* src, size_t size_bytes) override {
    on_call("copy_on_device");
    inner_->copy_on_device(dst, src, size_bytes);
  }
  std::unique_ptr<PendingCopies> copy_to_host_later(const std::vector<HostCopy>& copies) override {
    on_call("copy_to_host_later");
    return inner_->copy_to_host_later(copies);
  }
  std::shared_ptr<HostSlabPool> make_pinned_pool(size_t region_bytes, size_t slab_bytes) override {
    return inner_->make_pinned_pool(region_bytes, slab_bytes);
  }
  void scatter_to_device(const uint8_t* src, const std::vector<HostPiece>& pieces) override {
    on_call("scatter_to_device");
    inner_->scatter_to_device(src, pieces);
  }
  Result<kernels::WeightView> load_weight(const TensorView& tensor) override { return inner_->load_weight(tensor); }
  bool reads_packed_weights(DType dtype, WeightUse use) const override {
    return inner_->reads_packed_weights(dtype, use);
  }
  Result<kernels::WeightView> load_packed_weight(const kernels::WeightView& packed) override {
    return inner_->load_packed_weight(packed);
  }
  void release_weight(const kernels::WeightView& weight) override { inner_->release_weight(weight); }
  Result<std::optional<kernels::WeightView>> load_stacked_weight(const std::vector<TensorView>& parts) override {
    return inner_->load_stacked_weight(parts);
  }
  Result<std::optional<kernels::WeightView>> load_stacked_packed_weight(
      const std::vector<kernels::WeightView>& parts) override {
    return inner_->load_stacked_packed_weight(parts);
  }
  std::optional<DeviceMemory> device_memory() const override { return inner_->device_memory(); }
  void reset_peak_memory() override { inner_->reset_peak_memory(); }
  DType kv_cache_dtype(DType weight_dtype) const override { return inner_->kv_cache_dtype(weight_dtype); }
  DType dequantised_fp8_dtype(int64_t block_rows, int64_t block_cols) const override {
    return inner_->dequantised_fp8_dtype(block_rows, block_cols);
  }
  std::optional<DevicePeaks> measure_peaks() override { return inner_->measure_peaks(); }
  bool can_capture() const override { return inner_->can_capture(); }
  void begin_capture() override { inner_->begin_capture(); }
  std::unique_ptr<CapturedGraph> end_capture() override { return inner_->end_capture(); }
  void replay(const CapturedGraph& graph) override {
    on_call("replay");
    inner_->replay(graph);
  }
  void begin_side_work() override {
    on_call("begin_side_work");
    inner_->begin_side_work();
  }
  void end_side_work() override {
    on_call("end_side_work");
    inner_->end_side_work();
  }
  void join_side_work() override {
    on_call("join_side_work");
    inner_->join_side_work();
  }
  Result<std::unique_ptr<DeviceExchange>> make_device_exchange(std::shared_ptr<Communicator> group,
                                                               ExchangeTransport transport) override {
    on_call("make_device_exchange");
    return inner_->make_device_exchange(std::move(group), transport);
  }

  void embedding(const kernels::WeightView& table, const int32_t* token_ids, int64_t num_tokens,
                 float* out) override {
    on_call("embedding");
    inner_->embedding(table, token_ids, num_tokens, out);
  }
  void rms_norm(const float* x, const kernels::WeightView& weight, float weight_offset, int64_t num_rows, int64_t dim,
                float eps, float* out) override {
    on_call("rms_norm");
    inner_->rms_norm(x, weight, weight_offset, num_rows, dim, eps, out);
  }
  void layer_norm(const float* x, const kernels::WeightView& weight, const kernels::WeightView& bias, int64_t num_rows,
                  int64_t dim, float eps, float* out) override {
    on_call("layer_norm");
    inner_->layer_norm(x, weight, bias, num_rows, dim, eps, out);
  }
  void add_rms_norm(float* residual, const float* x, const kernels::WeightView& weight, float weight_offset,
                    int64_t num_rows, int64_t dim, float eps, float* out) override {
    on_call("add_rms_norm");
    inner_->add_rms_norm(residual, x, weight, weight_offset, num_rows, dim, eps, out);
  }
  void rope(float* x, const int32_t* positions, int64_t num_tokens, int32_t num_heads, int32_t head_dim,
            int32_t rotary_dim, const float* inv_freq, float attention_scaling, kernels::RopeLayout layout) override {
    on_call("rope");
    inner_->rope(x, positions, num_tokens, num_heads, head_dim, rotary_dim, inv_freq, attention_scaling, layout);
  }
  void matmul(const float* x, const kernels::WeightView& w, const kernels::WeightView& bias, int64_t num_rows,
              float* y) override {
    on_call("matmul");
    inner_->matmul(x, w, bias, num_rows, y);
  }
  void matmul_group(const float* x, int64_t num_rows, std::initializer_list<MatmulOutput> outputs) override {
    on_call("matmul_group");
    inner_->matmul_group(x, num_rows, outputs);
  }
  void silu_mul(const float* gate, const float* up, int64_t count, float* out) override {
    on_call("silu_mul");
    inner_->silu_mul(gate, up, count, out);
  }
  void gelu_tanh_mul(const float* gate, const float* up, int64_t count, float* out) override {
    on_call("gelu_tanh_mul");
    inner_->gelu_tanh_mul(gate, up, count, out);
  }
  void gelu_mul(const float* gate, const float* up, int64_t count, float* out) override {
    on_call("gelu_mul");
    inner_->gelu_mul(gate, up, count, out);
  }
  void add(const float* a, const float* b, int64_t count, float* out) override {
    on_call("add");
    inner_->add(a, b, count, out);
  }
  void scale(const float* x, int64_t count, float factor, float* out) override {
    on_call("scale");
    inner_->scale(x, count, factor, out);
  }
  void softcap(const float* x, int64_t count, float cap, float* out) override {
    on_call("softcap");
    inner_->softcap(x, count, cap, out);
  }
  void write_kv(const float* k, const float* v, const int32_t* slot_mapping, int64_t num_tokens, int64_t kv_dim,
                DType cache_dtype, kernels::KvScales scales, void* k_cache, void* v_cache) override {
    on_call("write_kv");
    inner_->write_kv(k, v, slot_mapping, num_tokens, kv_dim, cache_dtype, scales, k_cache, v_cache);
  }
  void paged_attention(const float* q, const void* k_cache, const void* v_cache, const kernels::PagedBatch& batch,
                       const kernels::AttentionParams& params, float* out) override {
    on_call("paged_attention");
    inner_->paged_attention(q, k_cache, v_cache, batch, params, out);
  }
  void attention_front_end(const kernels::AttentionFrontEnd& f) override {
    on_call("attention_front_end");
    inner_->attention_front_end(f);
  }
  void attention_with_front_end(const kernels::AttentionFrontEnd& f, const kernels::PagedBatch& batch,
                                const kernels::AttentionParams& params, float* out) override {
    on_call("attention_with_front_end");
    inner_->attention_with_front_end(f, batch, params, out);
  }
  void moe_route(const float* logits, const kernels::WeightView& selection_bias, int64_t num_tokens,
                 const kernels::MoeRouting& routing, int32_t* expert_ids, float* expert_weights) override {
    on_call("moe_route");
    inner_->moe_route(logits, selection_bias, num_tokens, routing, expert_ids, expert_weights);
  }
  bool moe_step_reads_back(int64_t num_tokens, const kernels::MoeExperts& experts) override {
    return inner_->moe_step_reads_back(num_tokens, experts);
  }
  void moe_experts(const float* x, int64_t num_tokens, const int32_t* expert_ids, const float* expert_weights,
                   const kernels::MoeExperts& experts, float* workspace, int64_t* expert_token_counts,
                   float* out) override {
    on_call("moe_experts");
    inner_->moe_experts(x, num_tokens, expert_ids, expert_weights, experts, workspace, expert_token_counts, out);
  }
  void moe_combine(const float* y, const int32_t* row_of_slot, const float* expert_weights, int64_t num_tokens,
                   int32_t top_k, int64_t hidden, float* out) override {
    on_call("moe_combine");
    inner_->moe_combine(y, row_of_slot, expert_weights, num_tokens, top_k, hidden, out);
  }
  void head_matmul(const kernels::HeadProducts& p, float* scratch) override {
    on_call("head_matmul");
    inner_->head_matmul(p, scratch);
  }
  bool mla_expanded_attention(const kernels::PagedBatch& batch, const kernels::MlaExpandedAttention& a) override {
    on_call("mla_expanded_attention");
    return inner_->mla_expanded_attention(batch, a);
  }
  void copy_rows(const float* src, int64_t src_stride, int64_t num_rows, int64_t width, float* dst,
                 int64_t dst_stride) override {
    on_call("copy_rows");
    inner_->copy_rows(src, src_stride, num_rows, width, dst, dst_stride);
  }
  void pack_rows(const float* x, int64_t num_rows, int64_t width, DType dtype, void* out) override {
    on_call("pack_rows");
    inner_->pack_rows(x, num_rows, width, dtype, out);
  }
  void unpack_rows(const void* packed, int64_t num_rows, int64_t width, DType dtype, float* out) override {
    on_call("unpack_rows");
    inner_->unpack_rows(packed, num_rows, width, dtype, out);
  }
  void moe_dispatch(const float* x, int64_t num_tokens, int64_t hidden, const int32_t* expert_ids, int32_t top_k,
                    const kernels::ExpertDispatch& dispatch, float* send_rows) override {
    on_call("moe_dispatch");
    inner_->moe_dispatch(x, num_tokens, hidden, expert_ids, top_k, dispatch, send_rows);
  }
  void sample_rows(const float* logits, int64_t vocab, const kernels::SampleParams* params, int64_t num_draws,
                   int32_t* token_ids) override {
    on_call("sample_rows");
    inner_->sample_rows(logits, vocab, params, num_draws, token_ids);
  }
  void gather_rows(const int32_t* src, const int32_t* row_of, int64_t num_rows, int64_t width, int32_t* dst) override {
    on_call("gather_rows");
    inner_->gather_rows(src, row_of, num_rows, width, dst);
  }
  void gated_mlp(const float* x, const kernels::WeightView& gate_up, const kernels::WeightView& down,
                 int64_t num_rows, GluActivation activation, float* scratch, float* out) override {
    on_call("gated_mlp");
    inner_->gated_mlp(x, gate_up, down, num_rows, activation, scratch, out);
  }
  bool fuses_norm_products(int64_t num_rows, DType weight_dtype) const override {
    return inner_->fuses_norm_products(num_rows, weight_dtype);
  }
  void norm_matmul(const float* x, const NormWeights& norm, const kernels::WeightView& w, int64_t num_rows,
                   float* normed, float* y) override {
    on_call("norm_matmul");
    inner_->norm_matmul(x, norm, w, num_rows, normed, y);
  }
  void matmul_add(const float* x, const kernels::WeightView& w, int64_t num_rows, float* delta,
                  float* residual) override {
    on_call("matmul_add");
    inner_->matmul_add(x, w, num_rows, delta, residual);
  }
  void norm_gated_mlp_add(float* residual, const NormWeights& norm, const kernels::WeightView& gate_up,
                          const kernels::WeightView& down, int64_t num_rows, GluActivation activation, float* normed,
                          float* scratch, float* delta) override {
    on_call("norm_gated_mlp_add");
    inner_->norm_gated_mlp_add(residual, norm, gate_up, down, num_rows, activation, normed, scratch, delta);
  }

 protected:
  Backend& inner() { return *inner_; }

 private:
  std::unique_ptr<Backend> inner_;
};


}  // namespace deepinfer
