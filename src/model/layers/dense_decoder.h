// The pre-norm decoder stack shared by the Llama family (Llama, Qwen2, Qwen3, Mistral):
// embed -> N x [norm -> attention -> add -> norm -> gated MLP -> add] -> norm -> lm_head.
// An architecture file picks the options; the graph lives here once.
#pragma once

#include <memory>
#include <vector>

#include "model/layers/attention.h"
#include "model/layers/mlp.h"

namespace deepinfer {

struct DenseDecoderOptions {
  bool qkv_bias = false;
  bool o_bias = false;
  bool mlp_bias = false;
  bool qk_norm = false;
};

class DenseDecoder final : public CausalLM {
 public:
  static Result<std::unique_ptr<CausalLM>> load(const ModelSource& source, const DenseDecoderOptions& options);

  int64_t kv_bytes_per_token() const override;
  void allocate_kv_cache(const KvCacheShape& shape) override;
  KvCacheShape kv_cache_shape() const override { return kv_shape_; }
  void copy_kv_blocks(const std::vector<std::pair<int32_t, int32_t>>& src_dst) override;
  int64_t kv_floats_per_block() const override;
  void read_kv_blocks(const std::vector<int32_t>& block_ids, float* host) const override;
  void write_kv_blocks(const std::vector<int32_t>& block_ids, const float* host) override;
  void forward(const ForwardBatch& batch, float* logits) override;
  int64_t weight_bytes_per_token() const override;

 private:
  struct Layer {
    RmsNorm input_norm;
    AttentionLayer attention;
    RmsNorm post_attention_norm;
    GatedMlp mlp;
  };
  DenseDecoder(const ModelSource& source) : CausalLM(source.config, *source.backend), weights_(source.weights) {}
  void ensure_workspace(int64_t num_tokens, int64_t num_logit_rows);

  std::shared_ptr<const WeightStore> weights_;  // keeps the mapped weights alive
  kernels::WeightView embed_tokens_;  // [vocab, hidden]
  kernels::WeightView lm_head_;       // [vocab, hidden]; the embedding when tied
  std::vector<Layer> layers_;
  RmsNorm final_norm_;
  KvCacheShape kv_shape_;
  int64_t workspace_tokens_ = 0;
  int64_t workspace_logit_rows_ = 0;
  DeviceBuffer hidden_;   // [num_tokens, hidden] the residual stream
  DeviceBuffer normed_;   // [num_tokens, hidden]
  DeviceBuffer delta_;    // [num_tokens, hidden] a sub-layer's output
  DeviceBuffer scratch_;  // attention / MLP intermediates
  DeviceBuffer logit_hidden_;  // [num_logit_rows, hidden]
  DeviceBuffer logits_;        // [num_logit_rows, vocab]
};

}  // namespace deepinfer
