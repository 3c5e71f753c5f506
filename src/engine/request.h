// Request: one sequence the scheduler tracks, from arrival to finish. A user request with n > 1
// becomes n of these (sample_index 0..n-1) sharing the prompt's KV blocks.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "core/check.h"
#include "deepinfer/sampling_params.h"
#include "kvcache/prefix_hash.h"
#include "kvstore/page_format.h"
#include "model/model.h"
#include "sampling/logits_processor.h"

namespace deepinfer {

class PrefillKvSink;  // engine/prefill_kv_export.h

// An image's encoder input and output, shared by the requests that send the same pixels.
struct EncodedImage {
  // As the model's preprocessor made them (CausalLM::encode_image); dropped once encoded.
  std::vector<float> pixels;
  ImageGrid grid;           // the pixels' grid of patches (Qwen2-VL's image_grid_thw)
  std::vector<float> rows;  // [tokens, hidden_size]: the encoder's output once ready
  // Set by the step that encoded it (ForwardBatch::ImageToEncode::ready). Every step built while
  // it is unset asks to encode it; the first to run does, and later ones find it set (steps run
  // in launch order). A step that failed leaves it unset, so nothing reads rows it did not write.
  std::atomic<bool> ready{false};
};

// An image of a prompt (multimodal models, CausalLM::image_input): its placeholder tokens
// [first_token, first_token + num_tokens) take the encoder's rows instead of their embeddings
// (and see each other both ways when bidirectional); hash names its pixels (SHA-256), which stand
// for those tokens in the prefix cache's block hashes.
struct PromptImage {
  int32_t first_token = 0;
  int32_t num_tokens = 0;
  std::shared_ptr<EncodedImage> image;
  BlockHash hash{};
  bool bidirectional = true;  // ImageInputFormat::bidirectional
  // ImageInputFormat::mrope: the still image's merged grid, mrope_rows x mrope_columns tokens in
  // row-major order; 0: its tokens take 1D positions.
  int32_t mrope_rows = 0;
  int32_t mrope_columns = 0;
  int32_t num_sets = 1;  // 1 + ImageInputFormat::deepstack_layers: the image's sets of rows

  int32_t end_token() const { return first_token + num_tokens; }
  // The rope positions the image spans: M-RoPE places token (r, c) at (s, s + r, s + c) from the
  // image's first position s, and the text after it at s + max(rows, columns).
  int32_t rope_span() const { return mrope_rows > 0 ? std::max(mrope_rows, mrope_columns) : num_tokens; }
};

enum class RequestStatus : uint8_t { kWaiting, kRunning, kFinished };

enum class FinishReason : uint8_t {
  kNone,
  kStop,    // an eos / stop token id or a stop string
  kLength,  // max_tokens or the model's context length
  kAbort,   // cancelled by the caller
  kPrefilled,  // PROMPT mode: prefill done, handed on as a PrefilledRequest
};

struct Request {
  int64_t seq_id = 0;      // unique per sequence (the KV cache's key)
  int64_t request_id = 0;  // the caller's id; shared by the n samples of one request
  int32_t sample_index = 0;
  SamplingParams params;
  uint64_t seed = 0;        // params.seed, or derived from the request id
  int32_t priority = 0;     // lower runs first under the priority policy
  int64_t arrival = 0;      // arrival order
  std::string cache_salt;   // tenant isolation of the prefix cache (set by the server only)
  TrafficClass kv_cache_class = TrafficClass::kDefault;  // TTL of its pages in the persistent store
  // PROMPT mode: its KV reaches the decode side through the persistent store, so the handover
  // copies none out (engine_core.h, PrefillHandover::kThroughStore).
  bool kv_through_store = false;
  // PROMPT mode, PrefillHandover::kStream: where its prompt's KV goes while the prefill runs, and
  // how many of its prompt blocks went there so far (engine/prefill_kv_export.h).
  std::shared_ptr<PrefillKvSink> kv_sink;
  int32_t kv_blocks_streamed = 0;
  // A first token the caller already streamed (a cluster's prefill worker drew it, for the sample
  // 0 of a prefilled n > 1 request): appended instead of this sequence's own first draw, with
  // nothing of it emitted but a finish it causes.
  std::optional<int32_t> delivered_first_token;

  RequestStatus status = RequestStatus::kWaiting;
  // Its structured-output grammar is still compiling: the scheduler runs its prompt but not the
  // last token, whose logits are sampled through the grammar's mask.
  bool awaiting_grammar = false;
  // Pipelined scheduling (EngineCore): the scheduler leaves this sequence out of the step scheduled
  // while one is in flight, because that step draws its last token or the host samples its next.
  bool sits_out_step_ahead = false;
  FinishReason finish_reason = FinishReason::kNone;
  // Speculative decoding (engine/speculator.h): draft tokens for the positions after the last
  // token, each with its confidence; the next step verifies the first num_verify_drafts of them
  // (set before scheduling, lowered by the scheduler when the step's budget or blocks run short).
  std::vector<int32_t> drafts;
  std::vector<float> draft_confidences;
  int32_t num_verify_drafts = 0;
  int32_t num_drafts_verified = 0;  // over its life, and of them accepted
  int32_t num_drafts_accepted = 0;
  int32_t num_computed_tokens = 0;  // tokens whose KV is in the cache
  int32_t num_cached_tokens = 0;    // prompt tokens found in the prefix cache at admission
  int32_t num_preemptions = 0;
  // The chain hashes of its blocks as far as prefix-cache lookups went: a request that waits is
  // looked up every step, and hashes each block once (made by its first lookup).
  std::optional<BlockHashChain> prefix_hashes;

  // The sequence's tokens are one array, the prompt then the outputs, so a view of any part is
  // free and a step copies no history.
  void set_prompt(std::vector<int32_t> prompt) {
    token_ids_ = std::move(prompt);
    num_prompt_tokens_ = static_cast<int32_t>(token_ids_.size());
  }
  // The prompt's images, in order and apart, inside the prompt (after set_prompt).
  void set_images(std::vector<PromptImage> images);
  const std::vector<PromptImage>& images() const { return images_; }
  // The position token pos rotates by: pos, less what the M-RoPE images wholly before it give back
  // (num_tokens - rope_span() each). An image's own tokens take theirs from its grid.
  int32_t rope_position(int32_t pos) const {
    int32_t shift = 0;
    for (const PromptImage& image : images_) {
      if (image.end_token() > pos) break;
      shift += image.num_tokens - image.rope_span();
    }
    return pos - shift;
  }
  // What the prefix cache hashes: the tokens, except that an image's placeholders are ids made
  // from its hash (negative, so no token id matches them), so another image misses.
  std::span<const int32_t> cache_tokens() const { return images_.empty() ? all_tokens() : cache_token_ids_; }
  std::span<const int32_t> prompt_cache_tokens() const { return cache_tokens().first(prompt_size()); }
  // Where a prefill chunk over [begin, end) may end: not inside a bidirectional image, whose tokens
  // run in one forward so they see each other. Before such an image that starts past begin, else
  // after the image (past end: the chunk grows to hold it, which the scheduler allows only in a
  // step it leads). A causal image's tokens (Qwen2.5-VL's) may run over several chunks.
  int32_t chunk_end(int32_t begin, int32_t end) const;
  // Pipelined scheduling: while the next step is scheduled, the token a step in flight draws for
  // this sequence stands at the end as kPendingToken (its value reaches the next step on the model
  // runner's thread); it is taken off before that step's result is appended.
  static constexpr int32_t kPendingToken = -1;
  void push_pending_token() {
    token_ids_.push_back(kPendingToken);
    if (!images_.empty()) cache_token_ids_.push_back(kPendingToken);
  }
  void pop_pending_token() {
    DI_CHECK(!token_ids_.empty() && token_ids_.back() == kPendingToken, "sequence " << seq_id << " has no pending token");
    token_ids_.pop_back();
    if (!images_.empty()) cache_token_ids_.pop_back();
  }
  void append_output(int32_t token) {
    token_ids_.push_back(token);
    if (!images_.empty()) cache_token_ids_.push_back(token);
    if (penalty_history_) penalty_history_->append_output(token);
  }
  // From now on keeps what the repetition / frequency / presence penalties read of the history,
  // so a step applies them without walking it (for a request whose params use one).
  void track_penalties(int64_t vocab) {
    penalty_history_.emplace(vocab, prompt_token_ids());
    for (int32_t token : output_token_ids()) penalty_history_->append_output(token);
  }
  // nullptr unless track_penalties was called.
  const PenaltyHistory* penalty_history() const { return penalty_history_ ? &*penalty_history_ : nullptr; }
  std::span<const int32_t> all_tokens() const { return token_ids_; }
  std::span<const int32_t> prompt_token_ids() const { return all_tokens().first(prompt_size()); }
  std::span<const int32_t> output_token_ids() const { return all_tokens().subspan(prompt_size()); }
  int32_t num_prompt_tokens() const { return num_prompt_tokens_; }
  int32_t num_output_tokens() const { return num_tokens() - num_prompt_tokens_; }
  int32_t num_tokens() const { return static_cast<int32_t>(token_ids_.size()); }
  // The token at absolute position i (prompt, then outputs).
  int32_t token_at(int32_t i) const { return token_ids_[static_cast<size_t>(i)]; }
  bool is_finished() const { return status == RequestStatus::kFinished; }

 private:
  size_t prompt_size() const { return static_cast<size_t>(num_prompt_tokens_); }

  std::vector<int32_t> token_ids_;
  int32_t num_prompt_tokens_ = 0;
  std::vector<PromptImage> images_;
  std::vector<int32_t> cache_token_ids_;  // cache_tokens(), kept only with images
  std::optional<PenaltyHistory> penalty_history_;
};

}  // namespace deepinfer
