// Turns the scheduler's decision into the model's ForwardBatch: tokens, positions, slot
// mapping and block tables of every scheduled sequence, and which rows need logits.
#pragma once

#include <cstdint>
#include <vector>

#include "engine/scheduler.h"
#include "model/model.h"

namespace deepinfer {

// Where one scheduled sequence's rows landed in the batch and its logits.
struct ScheduledRows {
  Request* request = nullptr;
  int32_t first_position = 0;     // absolute position of its first new token
  int32_t num_new_tokens = 0;
  int32_t first_logit_row = -1;   // index into the logits of its first returned row; -1: none
  int32_t num_prompt_logprob_rows = 0;  // rows before the sampling row that score prompt tokens
  // Its last new token is the sequence's last (or its last draft): sample after it, and after
  // each of the num_drafts drafts (speculative decoding: the logit rows end with 1 + num_drafts
  // consecutive rows, the golden row and one per draft).
  bool samples = false;
  int32_t num_drafts = 0;
};

struct BuiltBatch {
  ForwardBatch batch;
  std::vector<ScheduledRows> rows;  // in scheduled order
  // The images the step encodes (batch.images_to_encode's), whose pixels the engine drops once the
  // step is collected and the rows are ready.
  std::vector<std::shared_ptr<EncodedImage>> encoded_images;
};

// Logit rows: a sequence's prompt-logprob rows (when params.prompt_logprobs is set) and then its
// sampling row and draft rows, in scheduled order.
// drafts_as_sequences (CausalLM::rows_may_share_sequences): a decode's golden and draft rows
// go in as one-token sequences over its table, so a verify step is decode-shaped.
BuiltBatch build_forward_batch(const SchedulerOutput& scheduled, const KvCacheManager& kv_cache,
                               bool drafts_as_sequences = false);

}  // namespace deepinfer
