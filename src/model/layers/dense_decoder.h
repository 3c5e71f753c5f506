// The pre-norm decoder stack shared by every architecture we serve:
// embed -> N x [norm -> attention -> add -> norm -> feed-forward -> add] -> norm -> lm_head.
// A layer's attention is GQA (AttentionLayer) or MLA (MlaLayer) and its feed-forward a gated MLP
// or a mixture of experts (MoeLayer); the KV cache is sized per layer kind. An architecture file
// picks the options; the graph lives here once.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <variant>
#include <vector>

#include "model/decode_graphs.h"
#include "model/expert_parallel.h"
#include "model/expert_rebalance.h"
#include "model/layers/attention.h"
#include "model/layers/mla.h"
#include "model/layers/mlp.h"
#include "model/layers/moe.h"

namespace deepinfer {

struct DenseDecoderOptions {
  bool qkv_bias = false;
  bool o_bias = false;
  bool mlp_bias = false;
  bool qk_norm = false;
  // Every layer uses multi-head latent attention (DeepSeek-V2/V3) instead of GQA.
  std::optional<MlaOptions> mla;
  // The feed-forward of layer i is a MoeLayer when moe is set and is_moe_layer(i) (every layer
  // when is_moe_layer is empty), else a GatedMlp of config.intermediate_size.
  std::optional<MoeOptions> moe;
  std::function<bool(int64_t layer)> is_moe_layer;
  std::string ffn_name = "mlp";  // model.layers.<i>.<ffn_name>: Mixtral's published checkpoints say block_sparse_moe
  // Gemma: every RMSNorm (the q/k norms too) stores w - 1 and scales by (1 + w).
  float norm_weight_offset = 0.0f;
  // Gemma 2/3: each sub-layer's output is normalised before the residual add
  // (post_attention_layernorm, post_feedforward_layernorm), the feed-forward input by
  // pre_feedforward_layernorm.
  bool sandwich_norms = false;
  // Gemma: embeddings times sqrt(hidden_size), the factor rounded to the embedding's dtype.
  bool scale_embeddings = false;
  bool attention_sinks = false;  // GPT-OSS: model.layers.<i>.self_attn.sinks [num_heads]
  // Multimodal models (Gemma 3): the image encoder whose rows replace the image tokens' embeddings
  // (ForwardBatch::embedding_rows, after the embedding scale).
  std::shared_ptr<ImageEncoder> image_encoder;
};

using DecoderAttention = std::variant<AttentionLayer, MlaLayer>;
using DecoderFeedForward = std::variant<GatedMlp, MoeLayer>;

struct DecoderLayer {
  RmsNorm input_norm;
  DecoderAttention attention;
  RmsNorm post_attention_norm;
  DecoderFeedForward ffn;
  // sandwich_norms: post_attention_norm normalises the attention output, these the feed-forward's
  // input and output.
  std::optional<RmsNorm> pre_feedforward_norm, post_feedforward_norm;
};

// The multi-token-prediction block DeepSeek-V3 checkpoints ship after the decoder layers
// (model.layers.<num_hidden_layers + i>), the draft module of speculative decoding
// (CausalLM::forward_draft, dense_decoder_draft.cpp); plain decoding never runs it.
struct MtpLayerWeights {
  RmsNorm enorm, hnorm;     // [hidden]
  Linear eh_proj;           // [hidden, 2 * hidden]
  RmsNorm shared_head_norm; // [hidden]
  kernels::WeightView shared_head;  // [vocab, hidden]
  std::optional<Linear> confidence_head;  // [1, hidden] + bias, when the checkpoint has one
  std::optional<kernels::WeightView> embed_tokens;  // [vocab, hidden]: the layer's own copy, when it has one
  DecoderLayer block;  // attention + feed-forward as in a decoder layer; its KV cache is the module's own
};

class DenseDecoder final : public CausalLM {
 public:
  static Result<std::unique_ptr<CausalLM>> load(const ModelSource& source, const DenseDecoderOptions& options);

  int64_t kv_bytes_per_token() const override;
  DType kv_cache_dtype() const override;
  void allocate_kv_cache(const KvCacheShape& shape) override;
  KvCacheShape kv_cache_shape() const override { return kv_shape_; }
  void copy_kv_blocks(const std::vector<std::pair<int32_t, int32_t>>& src_dst) override;
  int64_t swa_kv_bytes_per_token() const override;
  void copy_swa_kv_blocks(const std::vector<std::pair<int32_t, int32_t>>& src_dst) override;
  int64_t kv_floats_per_block() const override;
  void read_kv_blocks(const std::vector<int32_t>& block_ids, float* host) const override;
  void write_kv_blocks(const std::vector<int32_t>& block_ids, const float* host) override;
  int64_t full_kv_bytes_per_block() const override;
  void read_full_kv_blocks(const std::vector<int32_t>& block_ids, uint8_t* host) const override;
  void write_full_kv_blocks(const std::vector<int32_t>& block_ids, const uint8_t* host) override;
  int64_t handover_kv_bytes_per_block(KvLayers layers) const override;
  void read_handover_kv_blocks(KvLayers layers, const std::vector<int32_t>& block_ids, uint8_t* host) const override;
  void write_handover_kv_blocks(KvLayers layers, const std::vector<int32_t>& block_ids, const uint8_t* host) override;
  std::vector<HandoverLayer> handover_layers() const override;
  std::unique_ptr<PendingCopies> read_handover_layer_blocks_later(int32_t layer, const std::vector<int32_t>& block_ids,
                                                                  uint8_t* host) const override;
  const ImageInputFormat* image_input() const override { return image_encoder_ ? &image_encoder_->format() : nullptr; }
  void encode_image(const float* pixels, const ImageGrid& grid, float* rows) override;
  void forward(const ForwardBatch& batch, float* logits) override;
  // Samples on the backend from the logits the forward left there; the token ids and host rows
  // come back in one readback (dense_decoder_sampling.cpp).
  std::unique_ptr<PendingCopies> launch_sampled(const ForwardBatch& batch,
                                                const std::vector<kernels::SampleParams>& draws, int32_t* token_ids,
                                                const std::vector<int32_t>& host_rows, float* host_logits) override;
  int64_t weight_bytes_per_token() const override;
  int64_t num_graph_replays() const override {
    return (graphs_ ? graphs_->num_replays() : 0) + (draft_graphs_ ? draft_graphs_->num_replays() : 0);
  }

  ExpertTokenCounts expert_token_counts() const override;
  void reset_expert_token_counts() override;
  int64_t routed_weight_bytes_per_step() const override;
  const std::vector<MtpLayerWeights>& mtp_layers() const { return mtp_layers_; }
  int32_t num_draft_modules() const override { return static_cast<int32_t>(mtp_layers_.size()); }
  // MLA layers write a step's KV before attending; GQA layers do when the batch's rows share
  // sequences (the fused decode front end, which writes a row's KV inside its attention, steps aside).
  bool rows_may_share_sequences() const override { return true; }
  void forward_draft(const ForwardBatch& batch, const std::vector<int32_t>& hidden_rows, DraftInput input,
                     const DraftOutputs& outputs) override;
  bool run_idle_step() override;
  bool request_expert_rebalance() override;
  int64_t num_group_rounds() const override { return group_rounds_; }

 private:
  using Layer = DecoderLayer;
  DenseDecoder(const ModelSource& source)
      : CausalLM(source.config, *source.backend),
        weights_(source.weights),
        arena_(source.arena),
        expert_parallel_(source.expert_parallel),
        expert_exchange_(source.expert_exchange) {}
  // sliding_rope: the rope of sliding-window layers when it differs (Gemma 3's local layers).
  static Result<Layer> load_layer(const ModelSource& source, const DenseDecoderOptions& options, int64_t index,
                                  const RopeTable& rope, const RopeTable* sliding_rope = nullptr);
  Result<void> load_mtp_layers(const ModelSource& source, const DenseDecoderOptions& options, const RopeTable& rope);
  // Grows the activation buffers; a move drops the decode graphs, which point into them.
  void ensure_workspace(int64_t num_tokens, int64_t num_logit_rows);
  // Drops the decode and draft graphs (they point into buffers that are about to move).
  void clear_graphs();
  // forward_draft's buffers for this many rows (moves them, and drops the draft graphs, to grow).
  void ensure_draft_buffers(int64_t rows);
  // The draft module over a batch already uploaded, from draft_hidden_ on: its outputs, then the
  // logits and confidences of num_logit_rows rows (all of them in order when
  // all_rows, else those draft_logit_rows_ names). Enqueues only, so a graph can capture it.
  void enqueue_draft(const DeviceBatch& device, int64_t num_logit_rows, bool all_rows);
  // Enqueues the forward of a batch on the device, leaving logits_ [logit rows, vocab]: the rows
  // listed in logit_rows, or every row when it is null.
  // after_layer: ForwardBatch::after_layer, or null.
  void enqueue_forward(const DeviceBatch& batch, const std::vector<int32_t>* logit_rows,
                       const std::function<void(int32_t)>* after_layer = nullptr);
  // The decode fusion (dense_decoder_fused.cpp): layers run on the residual stream itself, their
  // norms and residual adds folded into the products, when every layer can and the backend fuses
  // for num_tokens rows. residual_stream_dtype: the layers' weight dtype when every layer can.
  std::optional<DType> residual_stream_dtype() const;
  bool runs_residual_stream(int64_t num_tokens) const;
  void enqueue_residual_layer(const Layer& layer, const DeviceBatch& batch);
  // The whole forward of batch (from a decode graph when it can), leaving logits_ on the backend;
  // draws, when given, go up in the same copy as the batch: returns their device copy.
  const kernels::SampleParams* run_forward(const ForwardBatch& batch,
                                           const std::vector<kernels::SampleParams>* draws = nullptr);
  // Whether a step of num_tokens tokens through ffn reads its MoE grouping back
  // (MoeLayer::step_reads_back): a step with such a layer runs eagerly, not from a graph.
  bool reads_back(const DecoderFeedForward& ffn, int64_t num_tokens) const;
  // Whether the layer's pages are addressed by block_table (not the sliding-window tables).
  bool uses_full_tables(const Layer& layer) const;
  // Whether the layer is of the kind (KvLayers::kSliding: it has a sliding window).
  static bool is_of(const Layer& layer, KvLayers layers);
  // Expert parallelism: joins the group's rounds until one runs this rank's forward of `kind`
  // with its num_tokens; the rounds of the other kind before it run here without tokens.
  void join_group_forward(GroupForward kind, int64_t num_tokens);
  // A round of the group without tokens of this rank's: its MoE layers of that kind serve the
  // other ranks' rows.
  void run_idle_forward(GroupForward kind);
  // Expert parallelism: waits for the MoE layers' exchanges left on the stream (MoeLayer::forward),
  // which notices a rank that is gone; before every wait of the host on the stream in a forward.
  void wait_for_exchanges() const {
    if (expert_exchange_) expert_exchange_->wait_enqueued();
  }

  std::shared_ptr<const WeightStore> weights_;  // keeps the mapped weights alive
  std::shared_ptr<WeightArena> arena_;          // keeps weights computed at load alive
  std::shared_ptr<const ExpertParallelism> expert_parallel_;  // null outside an expert-parallel group
  std::shared_ptr<DeviceExchange> expert_exchange_;           // with expert_parallel_: the MoE layers' rows
  // Under expert parallelism: every forward round starts with its start_round (the vote, EPLB).
  std::unique_ptr<ExpertRebalancer> rebalancer_;
  int64_t group_rounds_ = 0;
  kernels::WeightView embed_tokens_;  // [vocab, hidden]
  kernels::WeightView lm_head_;       // [vocab, hidden]; the embedding when tied
  std::vector<Layer> layers_;
  std::vector<MtpLayerWeights> mtp_layers_;
  RmsNorm final_norm_;
  float embedding_scale_ = 1.0f;             // scale_embeddings
  std::shared_ptr<ImageEncoder> image_encoder_;  // DenseDecoderOptions::image_encoder
  std::optional<DType> residual_stream_dtype_;  // residual_stream_dtype(), set at load
  std::optional<float> final_logit_softcap_;  // config.final_logit_softcapping
  KvCacheShape kv_shape_;
  int64_t workspace_tokens_ = 0;
  int64_t workspace_logit_rows_ = 0;
  DeviceBuffer hidden_;   // [num_tokens, hidden] the residual stream
  DeviceBuffer normed_;   // [num_tokens, hidden]
  DeviceBuffer delta_;    // [num_tokens, hidden] a sub-layer's output
  DeviceBuffer scratch_;  // attention / feed-forward intermediates
  DeviceBuffer logit_hidden_;  // [num_logit_rows, hidden]
  DeviceBuffer logits_;        // [num_logit_rows, vocab]
  StepInputs inputs_;          // eager steps' inputs
  // The draft module's (forward_draft): its inputs, the hidden states it reads ([rows, hidden])
  // and [rows, 2 * hidden] joined, its outputs (the next draft's kDraftOutput rows), confidences
  // [rows], and the shape its KV cache was allocated for (num_blocks 0: not yet).
  StepInputs draft_inputs_;
  DeviceBuffer draft_rows_, draft_hidden_, draft_joined_, draft_confidence_;
  DeviceBuffer draft_logit_rows_, draft_tokens_;  // [logit rows]: which output rows, their argmax
  int64_t draft_capacity_ = 0;  // rows of the buffers above
  DeviceBuffer draft_out_;
  int64_t draft_out_rows_ = 0;
  KvCacheShape draft_kv_shape_;
  // Decode-shaped draft calls as device graphs, like decode steps (set when graphs_ is).
  std::unique_ptr<DecodeGraphs> draft_graphs_;
  DeviceBuffer drawn_tokens_;  // [draws] int32 of launch_sampled; the next step's token_from_draw
                               // reads them
  // Decode steps as device graphs: set when the backend captures. A MoE layer's expert token
  // counters then also count the padding rows of graph steps (routed like any token).
  std::unique_ptr<DecodeGraphs> graphs_;
};

}  // namespace deepinfer
