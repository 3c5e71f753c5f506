// CausalLM: a loaded model that runs forward passes over a paged KV cache, and load_model(),
// which picks the architecture from config.json through the registry (model/archs/registry.cpp).
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "core/check.h"
#include "core/result.h"
#include "runtime/backend.h"
#include "weights/hf_config.h"
#include "weights/safetensors.h"

namespace deepinfer {

// An image's grid of patches as its preprocessor cut it (Qwen2-VL's image_grid_thw: temporal
// patches, rows and columns of patches); a fixed-size encoder's images (Gemma 3) take the default.
struct ImageGrid {
  int32_t frames = 1;
  int32_t rows = 0;
  int32_t columns = 0;

  bool operator==(const ImageGrid&) const = default;
};

// One forward step over a batch of sequences, described on the host. The engine fills it; the
// model copies it to the backend. Shapes as in kernels::PagedBatch.
struct ForwardBatch {
  std::vector<int32_t> token_ids;     // [num_tokens]
  std::vector<int32_t> positions;     // [num_tokens] absolute position of each token
  std::vector<int32_t> slot_mapping;  // [num_tokens] cache row: block_id * block_size + offset
  std::vector<int32_t> query_start;   // [num_seqs + 1]
  std::vector<int32_t> seq_len;       // [num_seqs] cached tokens after this step
  std::vector<int32_t> block_table;   // [num_seqs, max_blocks_per_seq]
  int32_t max_blocks_per_seq = 0;
  std::vector<int32_t> logit_rows;    // token rows whose logits are returned, in this order
  // When the KV cache keeps the sliding-window layers' pages apart (KvCacheShape::num_swa_blocks
  // > 0): their slots and tables, shaped as slot_mapping and block_table. Empty otherwise.
  std::vector<int32_t> swa_slot_mapping;
  std::vector<int32_t> swa_block_table;
  // SWA bounded replay (docs/kvstore.md): when set, the sliding-window layers see only the keys
  // from a page-aligned replay start on: swa_block_table begins at that start's page and
  // swa_seq_len[s] counts tokens from it. A slot_mapping entry < 0 leaves the full-attention
  // layers' cache untouched (the replay reads their stored KV and does not rewrite it).
  std::vector<int32_t> swa_seq_len;
  // A step launched before the one ahead of it finished (engine/model_runner.h): empty, or per
  // token -1 (its id is in token_ids) or the index of the draw of the previous launch_sampled
  // whose token it is, taken where the draws are (Backend::gather_rows).
  std::vector<int32_t> token_from_draw;
  // [num_seqs] the sequences' ids (the KV cache's keys), or empty. With them a decode step's
  // block tables are kept on the device between steps and only the rows that changed are sent
  // (StepInputs).
  std::vector<int64_t> seq_ids;
  // Consecutive rows of some cached sequence go in as one-token sequences over its table
  // (CausalLM::rows_may_share_sequences; kernels::PagedBatch::rows_share_sequences).
  bool rows_share_sequences = false;
  // Rows that stand in for some tokens' embeddings, an image's placeholder tokens (what
  // CausalLM::encode_image wrote): token row first_token + i takes row i of rows ([num_tokens,
  // hidden_size] float32, host memory, read during the call that takes the batch; owner, when set,
  // keeps them alive as long as the batch). num_sets > 1 (ImageInputFormat::deepstack_layers):
  // set s of the same rows, rows + s * set_stride, is added to the output of decoder layer s - 1.
  struct EmbeddingRows {
    int32_t first_token = 0;
    int32_t num_tokens = 0;
    const float* rows = nullptr;
    std::shared_ptr<const void> owner = nullptr;
    int32_t num_sets = 1;
    int64_t set_stride = 0;
  };
  std::vector<EmbeddingRows> embedding_rows;
  // Images the call that takes the batch encodes first (CausalLM::encode_image: pixels in, rows
  // out, both host memory; owner keeps them alive), before it reads embedding_rows: each one whose
  // ready flag is unset, which it then sets (a step launched before it may have encoded it).
  struct ImageToEncode {
    const float* pixels = nullptr;
    ImageGrid grid;
    float* rows = nullptr;
    std::atomic<bool>* ready = nullptr;
    std::shared_ptr<const void> owner = nullptr;
  };
  std::vector<ImageToEncode> images_to_encode;
  // [num_tokens] or empty: how many keys past its own position each token sees
  // (kernels::PagedBatch::lookahead): an image's tokens see the whole image.
  std::vector<int32_t> lookahead;
  // [2, num_tokens] or empty: M-RoPE's height and width positions of each token, positions being its
  // temporal ones (Qwen2-VL's text model); set only on steps that hold an image's tokens, the one
  // place the three differ.
  std::vector<int32_t> mrope_positions;
  // Called after each decoder layer of this step with its index in the model's layer order, once
  // that layer's KV writes are enqueued, so a prefill's KV can leave layer by layer (a PROMPT
  // engine streaming it, engine/prefill_kv_export.h). A step with it set runs eagerly (no decode
  // graph), on the runner's thread.
  std::function<void(int32_t layer)> after_layer;

  int64_t num_tokens() const { return static_cast<int64_t>(token_ids.size()); }
  int32_t num_seqs() const { return static_cast<int32_t>(seq_len.size()); }
};

// tokens at positions [first_position, first_position + tokens.size()) of one sequence laid on
// blocks 0, 1, ..., num_blocks - 1 in order (slot == position), every row's logits wanted: the
// batch of a caller that holds a whole cache for one sequence.
ForwardBatch contiguous_sequence_batch(const std::vector<int32_t>& tokens, int32_t first_position,
                                       int32_t num_blocks);

// Tokens routed to each expert since load or the last reset_expert_token_counts:
// [num_moe_layers][num_experts], the layer index of each row in layer_ids (empty for dense models).
struct ExpertTokenCounts {
  std::vector<int64_t> layer_ids;
  std::vector<std::vector<int64_t>> counts;
  // How many experts of num_experts are the busiest `fraction` of them: ceil(fraction x num_experts)
  // (also what deepinfer-make-random-model --router-skew calibrates).
  static size_t busiest_count(double fraction, size_t num_experts);
  // Over every layer, the share of the routed tokens that went to that layer's busiest_count
  // experts (0 when nothing was routed).
  double busiest_share(double fraction) const;
  // Each layer's busiest expert's count over its mean count, averaged over the layers that routed
  // anything (1: even; the step time of an expert-parallel layer follows its busiest rank).
  double busiest_over_mean() const;
};

// How a multimodal model takes images (CausalLM::image_input).
struct ImageInputFormat {
  // image/preprocess.h's preprocess_gemma3 or try_preprocess_qwen2_vl.
  enum class Preprocessor : uint8_t { kGemma3, kQwen2Vl };
  Preprocessor preprocessor = Preprocessor::kGemma3;
  int32_t image_size = 0;        // Gemma 3: pixels per side of the square the encoder takes
  int32_t tokens_per_image = 0;  // Gemma 3: the rows every image becomes; 0: each its own (tokens_for)
  int32_t image_token_id = -1;   // the placeholder token, one per row, in a row
  // The tokens the prompt puts around the placeholders (Gemma 3's <start_of_image> and
  // <end_of_image>, Qwen2-VL's <|vision_start|> and <|vision_end|>); -1: none.
  int32_t begin_token_id = -1;
  int32_t end_token_id = -1;
  // Qwen2-VL's dynamic resolution: patches of patch_size pixels, temporal_patch_size frames deep,
  // merge_size x merge_size of them to a row; the processor's bounds on the resized pixel count.
  int32_t patch_size = 0;
  int32_t temporal_patch_size = 1;
  int32_t merge_size = 1;
  int64_t min_pixels = 0;
  int64_t max_pixels = 0;
  // Gemma 3: an image's tokens see each other both ways (ForwardBatch::lookahead); Qwen2-VL's are
  // causal.
  bool bidirectional = true;
  // Qwen2-VL: the image's tokens take M-RoPE positions from their place in its merged grid
  // (ForwardBatch::mrope_positions), and the text after it continues from its largest.
  bool mrope = false;
  // The Qwen2-VL family's normalisation (preprocessor_config.json's image_mean / image_std).
  std::array<float, 3> image_mean = {0.48145466f, 0.4578275f, 0.40821073f};  // OpenAI CLIP's
  std::array<float, 3> image_std = {0.26862954f, 0.26130258f, 0.27577711f};
  // Qwen3-VL's DeepStack: the encoder also gives each image token this many more rows, one for each
  // of the first decoder layers, added to that layer's output (ForwardBatch::EmbeddingRows::num_sets).
  int32_t deepstack_layers = 0;

  // The rows an image of this grid becomes.
  int32_t tokens_for(const ImageGrid& grid) const {
    if (tokens_per_image > 0) return tokens_per_image;
    return grid.frames * grid.rows * grid.columns / (merge_size * merge_size);
  }
  // The float32 values the encoder writes for an image of this grid: [1 + deepstack_layers,
  // tokens_for(grid), hidden] (CausalLM::encode_image).
  int64_t encoded_values(const ImageGrid& grid, int64_t hidden) const {
    return int64_t{1 + deepstack_layers} * tokens_for(grid) * hidden;
  }
  // The float32 values the encoder takes for an image of this grid.
  int64_t pixel_count(const ImageGrid& grid) const {
    if (preprocessor == Preprocessor::kGemma3) return int64_t{3} * image_size * image_size;
    return int64_t{grid.frames} * grid.rows * grid.columns * 3 * temporal_patch_size * patch_size * patch_size;
  }
};

// The image format of a model with this config, from config.json alone (what a router, which loads
// no weights, needs to place images); nullopt when the architecture reads no images. Errors name
// the config field.
Result<std::optional<ImageInputFormat>> image_input_format(const ModelConfig& config);

// A multimodal model's image encoder (vision tower and projector), run by the model that owns it.
class ImageEncoder {
 public:
  virtual ~ImageEncoder() = default;
  virtual const ImageInputFormat& format() const = 0;
  // CausalLM::encode_image.
  virtual void encode(const float* pixels, const ImageGrid& grid, float* rows) = 0;
};

struct KvCacheShape {
  int32_t num_blocks = 0;
  int32_t block_size = 0;
  // > 0: the sliding-window layers get their own cache of this many blocks, addressed by
  // ForwardBatch's swa_* tables (KvCacheConfig::num_swa_blocks); 0: every layer uses num_blocks.
  int32_t num_swa_blocks = 0;
};

// The attention layers without a sliding window (kFull) or with one (kSliding).
enum class KvLayers : uint8_t { kFull, kSliding };

class CausalLM {
 public:
  virtual ~CausalLM() = default;
  const ModelConfig& config() const { return config_; }
  Backend& backend() const { return backend_; }

  // Bytes of KV cache one token takes over all layers.
  virtual int64_t kv_bytes_per_token() const = 0;
  // The element type of the cache (Backend::kv_cache_dtype, the same for GQA and MLA's latent
  // caches). read_kv_blocks moves float32 values whatever it is (fp8 codes times their scales) and
  // write_kv_blocks float32 into float32 or bf16 caches; the store's read/write_full_kv_blocks move
  // the cache's own bytes.
  virtual DType kv_cache_dtype() const { return DType::kF32; }
  // Of those, the bytes of the sliding-window layers when the model also has full-attention
  // layers (the part a split cache bounds by the window, KvCacheShape::num_swa_blocks); 0 when
  // the layers do not mix, and then the cache is never split.
  virtual int64_t swa_kv_bytes_per_token() const { return 0; }
  // (Re)allocates the KV cache; drops previous contents.
  virtual void allocate_kv_cache(const KvCacheShape& shape) = 0;
  virtual KvCacheShape kv_cache_shape() const = 0;
  // Copies whole KV blocks (every layer) from pair.first to pair.second: copy-on-write when
  // sequences that share blocks diverge (n > 1). With a split cache (num_swa_blocks > 0) it
  // copies the full-attention layers' blocks and copy_swa_kv_blocks the sliding layers'.
  virtual void copy_kv_blocks(const std::vector<std::pair<int32_t, int32_t>>& src_dst) = 0;
  virtual void copy_swa_kv_blocks(const std::vector<std::pair<int32_t, int32_t>>& src_dst) {
    DI_CHECK(src_dst.empty(), "this model's KV cache has no separate sliding-window blocks");
  }
  // Floats one block holds over all layers (K and V): the unit of read/write_kv_blocks.
  virtual int64_t kv_floats_per_block() const = 0;
  // Moves the KV of whole blocks between the cache and host memory ([block_ids.size(),
  // kv_floats_per_block()] floats, blocks in the given order, each block's layers in order).
  // Only for caches that are not split.
  virtual void read_kv_blocks(const std::vector<int32_t>& block_ids, float* host) const = 0;
  virtual void write_kv_blocks(const std::vector<int32_t>& block_ids, const float* host) = 0;
  // The KV store's pages: the layers block_table addresses (every layer, or with a split cache
  // only the full-attention ones, none when every layer slides; the sliding layers are rebuilt
  // by a replay, docs/kvstore.md), in the cache's own element type, moved without conversion:
  // [block_ids.size(), full_kv_bytes_per_block()] bytes, each block's layers in order, K then V.
  virtual int64_t full_kv_bytes_per_block() const = 0;
  virtual void read_full_kv_blocks(const std::vector<int32_t>& block_ids, uint8_t* host) const = 0;
  virtual void write_full_kv_blocks(const std::vector<int32_t>& block_ids, const uint8_t* host) = 0;
  // The PROMPT -> COMPLETION handover (PrefilledRequest) moves the layers without a sliding window
  // and those with one apart (KvLayers, by the model's layers whatever either engine's cache
  // split), the latter only for the blocks the next token's window reaches, in the cache's own
  // element type (kv_cache_dtype), as the store's pages. Bytes one block of those layers holds
  // (K and V; 0 when the model has none):
  virtual int64_t handover_kv_bytes_per_block(KvLayers layers) const {
    return layers == KvLayers::kFull ? full_kv_bytes_per_block() : 0;
  }
  // Moves those layers' KV of whole blocks between the cache and host memory ([block_ids.size(),
  // handover_kv_bytes_per_block(layers)] bytes, each block's layers in order, K then V). The ids
  // are of the table those layers use: swa_block_table for kSliding with a split cache,
  // block_table otherwise; all >= 0 unless the kind has no layers.
  virtual void read_handover_kv_blocks(KvLayers layers, const std::vector<int32_t>& block_ids, uint8_t* host) const {
    if (layers == KvLayers::kFull) read_full_kv_blocks(block_ids, host);
  }
  virtual void write_handover_kv_blocks(KvLayers layers, const std::vector<int32_t>& block_ids, const uint8_t* host) {
    if (layers == KvLayers::kFull) write_full_kv_blocks(block_ids, host);
  }
  // The handover's layers one by one, as ForwardBatch::after_layer counts them: which kind each
  // is, its index among that kind's layers, and its bytes per block (the bytes of one kind add up
  // to handover_kv_bytes_per_block; inside a block the layers lie in this order). Empty: the model
  // cannot hand its KV over layer by layer.
  struct HandoverLayer {
    KvLayers layers = KvLayers::kFull;
    int32_t index = 0;
    int64_t bytes_per_block = 0;
  };
  virtual std::vector<HandoverLayer> handover_layers() const { return {}; }
  // Enqueues copies of one decoder layer's KV of these blocks into host ([block_ids.size(),
  // bytes_per_block]) behind the work enqueued so far (Backend::copy_to_host_later); the ids are
  // of the table that layer uses, as for read_handover_kv_blocks.
  virtual std::unique_ptr<PendingCopies> read_handover_layer_blocks_later(int32_t /*layer*/,
                                                                          const std::vector<int32_t>& /*block_ids*/,
                                                                          uint8_t* /*host*/) const {
    throw std::logic_error("this model does not hand its KV over layer by layer");
  }
  // Multimodal models: how images enter the prompt; null when the model reads none.
  virtual const ImageInputFormat* image_input() const { return nullptr; }
  // Runs the image encoder on one preprocessed image (image_input()->pixel_count(grid) values as
  // its preprocessor makes them: Gemma 3's channels-first square, Qwen2-VL's patch rows of this
  // grid) and writes the rows that stand in for its placeholder tokens, [tokens_for(grid),
  // hidden_size] float32 in host memory (then each DeepStack layer's as many:
  // ImageInputFormat::encoded_values). Waits for the device; not thread-safe with forward.
  virtual void encode_image(const float* /*pixels*/, const ImageGrid& /*grid*/, float* /*rows*/) {
    throw std::logic_error("this model has no image encoder");
  }
  // Runs the batch; writes logits [logit_rows.size(), vocab_size] float32 to host memory.
  // Not thread-safe: one forward at a time.
  virtual void forward(const ForwardBatch& batch, float* logits) = 0;
  // Runs the batch and draws tokens where its logits are (kernels/ops.h sample_rows; draw.row
  // indexes logit_rows): token_ids[i] is draws[i]'s token. Of the logits only the rows listed in
  // host_rows (ascending) are copied, to host_logits ([host_rows.size(), vocab_size], in
  // host_rows' order). On a device only token ids and those rows leave it.
  void forward_sampled(const ForwardBatch& batch, const std::vector<kernels::SampleParams>& draws, int32_t* token_ids,
                       const std::vector<int32_t>& host_rows, float* host_logits) {
    launch_sampled(batch, draws, token_ids, host_rows, host_logits)->wait();
  }
  // Speculative decoding's draft module (DeepSeek-V3's multi-token prediction, MTP): how many the
  // checkpoint has (0: none; the last one serves every deeper draft).
  virtual int32_t num_draft_modules() const { return 0; }
  // Where a draft row's hidden state comes from: a token row of the last forward's final normed
  // hidden states (a first draft), or a row of the last forward_draft's module outputs (a deeper
  // draft, chained from the one before it). Both stay valid until the next forward or forward_draft.
  enum class DraftInput : uint8_t { kMainHidden, kDraftOutput };
  // Whether consecutive rows of one sequence may run as one-token sequences over the same table,
  // each seeing the rows before it (ForwardBatch::rows_share_sequences: every attention layer, the
  // draft module's too, then writes the whole step's KV before any row attends), so a speculative
  // verify step or draft call is decode-shaped and replays a decode graph.
  virtual bool rows_may_share_sequences() const { return false; }
  // What forward_draft returns for each of batch.logit_rows, in host memory; any may be null.
  struct DraftOutputs {
    float* logits = nullptr;      // [logit rows, vocab]: the logits of the token at p + 2
    int32_t* tokens = nullptr;    // [logit rows]: their argmax, taken where the logits are
    float* confidence = nullptr;  // [logit rows]: the confidence head's estimate (left as is
                                  // when the model has none)
  };
  // Runs the draft module over batch: row t joins the hidden state hidden_rows[t] of input (the
  // state at position p = batch.positions[t]) with the embedding of batch.token_ids[t] (the token
  // at p + 1), attends over the module's own KV cache at p (the main cache's shape, addressed by
  // the same tables; allocated at the first call and not counted in kv_bytes_per_token), and for
  // each of batch.logit_rows gives the draft of the token at p + 2 and, when the model has a
  // confidence head, its estimate that greedy verification accepts that draft. Errors when the
  // model has no draft module.
  virtual void forward_draft(const ForwardBatch& batch, const std::vector<int32_t>& hidden_rows, DraftInput input,
                             const DraftOutputs& outputs);
  // forward_sampled without the wait: on a device the step is enqueued and this returns while it
  // runs, so the next one can be enqueued behind it; token_ids and host_logits hold its results
  // once the returned copies are waited for, and must stay valid until then. The default runs
  // forward() and samples on the host (and takes no token_from_draw).
  virtual std::unique_ptr<PendingCopies> launch_sampled(const ForwardBatch& batch,
                                                        const std::vector<kernels::SampleParams>& draws,
                                                        int32_t* token_ids, const std::vector<int32_t>& host_rows,
                                                        float* host_logits);
  // Bytes of weights one decode step reads (every weight once; embeddings one row).
  virtual int64_t weight_bytes_per_token() const = 0;
  // The same for the one step run since reset_expert_token_counts, with each MoE layer counting the
  // experts that step routed tokens to (a batch reads many more than one token's top_k). Reads the
  // counters back (waits for the device). Benchmarks' roofline fractions.
  virtual int64_t routed_weight_bytes_per_step() const { return weight_bytes_per_token(); }
  virtual void reset_expert_token_counts() {}
  // Reads the counters back (waits for the device).
  virtual ExpertTokenCounts expert_token_counts() const { return {}; }
  // Expert parallelism (model/expert_parallel.h): joins one forward of the group without tokens of
  // this rank's own (its experts still serve the other ranks' tokens). Returns false, having run
  // nothing, when no rank had a forward in this round. A model outside a group returns false.
  virtual bool run_idle_step() { return false; }
  // Expert parallelism: asks for an EPLB re-placement of the experts at the start of the group's
  // next forward round, where every rank switches (model/expert_rebalance.h). Returns false, doing
  // nothing, for a model outside an expert-parallel group. Thread-safe.
  virtual bool request_expert_rebalance() { return false; }
  // The rounds of its group this model took part in (forwards and idle steps); 0 outside a group.
  virtual int64_t num_group_rounds() const { return 0; }
  // Forward steps and draft calls replayed from captured device graphs so far (model/decode_graphs.h).
  virtual int64_t num_graph_replays() const { return 0; }

 protected:
  CausalLM(ModelConfig config, Backend& backend) : config_(std::move(config)), backend_(backend) {}
  ModelConfig config_;
  Backend& backend_;
};

class WeightArena;  // model/layers/linear.h
struct ExpertParallelism;  // model/expert_parallel.h

// Everything an architecture's builder gets.
struct ModelSource {
  ModelConfig config;
  std::shared_ptr<const WeightStore> weights;
  Backend* backend = nullptr;
  // Holds weights made at load time; the model keeps a reference.
  std::shared_ptr<WeightArena> arena;
  // Set: the MoE layers hold this rank's experts and exchange rows with the group (model/expert_parallel.h).
  std::shared_ptr<const ExpertParallelism> expert_parallel;
  // With expert_parallel: the rows' exchange on this backend, one for every MoE layer (load_model
  // makes it with Backend::make_device_exchange).
  std::shared_ptr<DeviceExchange> expert_exchange;
};

// Loads config.json and the safetensors in dir, checks every tensor's presence and shape, and
// builds the model on the backend. Errors name the file, tensor or field.
// With expert_parallel, the model is this rank's share of an expert-parallel group (an error for
// a model without MoE layers).
Result<std::unique_ptr<CausalLM>> load_model(const std::string& dir, Backend& backend, bool show_progress = true,
                                             std::shared_ptr<const ExpertParallelism> expert_parallel = nullptr);

// The architectures load_model accepts, e.g. "LlamaForCausalLM".
std::vector<std::string> supported_architectures();

}  // namespace deepinfer
