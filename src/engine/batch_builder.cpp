// ForwardBatch assembly.
#include "engine/batch_builder.h"

#include <algorithm>

#include "core/check.h"

namespace deepinfer {
namespace {

// Appends table as one row of width entries. Padding and released sliding-window entries point
// at block 0; the kernels never read them. The rows are the one part of a step that grows with
// the context (a block id per block_size tokens), so they are written in bulk.
void append_padded_table(std::vector<int32_t>& rows, const std::vector<int32_t>& table, int32_t width) {
  const size_t row_start = rows.size();
  rows.resize(row_start + static_cast<size_t>(width), 0);
  std::transform(table.begin(), table.end(), rows.begin() + static_cast<std::ptrdiff_t>(row_start),
                 [](int32_t block) { return std::max(block, 0); });
}

// An image token's M-RoPE height and width positions at a row of the step.
struct MropeRow {
  int32_t row = 0;
  int32_t height = 0;
  int32_t width = 0;
};

// The request's images that run in [first_position, end), the step's rows from first_row on (the
// whole of a bidirectional image, any part of a causal one): their encoder rows in place of the
// placeholders' embeddings (encoded by this step when no step before did); each placeholder of a
// bidirectional image seeing the rest of its image (lookahead, made for the whole step at the
// first image); an M-RoPE image's tokens at their grid's positions (the temporal one in positions,
// the others in mrope_rows).
void add_images(const Request& request, int32_t first_position, int32_t end, int32_t first_row, BuiltBatch& built,
                std::vector<MropeRow>& mrope_rows) {
  ForwardBatch& batch = built.batch;
  for (const PromptImage& image : request.images()) {
    const int32_t begin = std::max(first_position, image.first_token);
    const int32_t stop = std::min(end, image.end_token());
    if (begin >= stop) continue;
    DI_CHECK(!image.bidirectional || stop == image.end_token(),
             "a step ends inside the image at tokens " << image.first_token << " + " << image.num_tokens);
    EncodedImage& encoded = *image.image;
    if (!encoded.ready.load()) {
      batch.images_to_encode.push_back(
          {encoded.pixels.data(), encoded.grid, encoded.rows.data(), &encoded.ready, image.image});
      built.encoded_images.push_back(image.image);
    }
    // The rows are [sets, image tokens, hidden] (ImageInputFormat::encoded_values).
    const int64_t set_stride = static_cast<int64_t>(encoded.rows.size()) / image.num_sets;
    const int64_t hidden = set_stride / image.num_tokens;
    batch.embedding_rows.push_back({first_row + begin - first_position, stop - begin,
                                    encoded.rows.data() + int64_t{begin - image.first_token} * hidden, image.image,
                                    image.num_sets, set_stride});
    if (image.mrope_rows > 0) {
      const int32_t start = request.rope_position(image.first_token);
      for (int32_t p = begin; p < stop; ++p) {
        const int32_t index = p - image.first_token;
        const int32_t row = first_row + p - first_position;
        batch.positions[static_cast<size_t>(row)] = start;
        mrope_rows.push_back({row, start + index / image.mrope_columns, start + index % image.mrope_columns});
      }
    }
    if (!image.bidirectional) continue;
    batch.lookahead.resize(batch.token_ids.size(), 0);
    for (int32_t p = begin; p < stop; ++p) {
      batch.lookahead[static_cast<size_t>(first_row + p - first_position)] = image.end_token() - 1 - p;
    }
  }
}

}  // namespace

BuiltBatch build_forward_batch(const SchedulerOutput& scheduled, const KvCacheManager& kv_cache,
                               bool drafts_as_sequences) {
  BuiltBatch built;
  ForwardBatch& batch = built.batch;
  const int32_t block_size = kv_cache.block_size();
  int32_t max_blocks = 0;
  for (const ScheduledSequence& s : scheduled.scheduled) {
    max_blocks = std::max(max_blocks, static_cast<int32_t>(kv_cache.block_table(s.request->seq_id).size()));
  }
  batch.max_blocks_per_seq = max_blocks;
  const size_t num_seqs = scheduled.scheduled.size();
  batch.block_table.reserve(num_seqs * static_cast<size_t>(max_blocks));
  batch.token_ids.reserve(static_cast<size_t>(scheduled.num_batched_tokens));
  batch.positions.reserve(static_cast<size_t>(scheduled.num_batched_tokens));
  batch.slot_mapping.reserve(static_cast<size_t>(scheduled.num_batched_tokens));
  batch.query_start.reserve(num_seqs + 1);
  batch.seq_len.reserve(num_seqs);
  batch.seq_ids.reserve(num_seqs);
  built.rows.reserve(num_seqs);
  batch.query_start.push_back(0);
  std::vector<MropeRow> mrope_rows;
  for (const ScheduledSequence& s : scheduled.scheduled) {
    const Request& request = *s.request;
    const std::vector<int32_t>& table = kv_cache.block_table(request.seq_id);
    const std::vector<int32_t>& swa_table = kv_cache.swa_block_table(request.seq_id);
    ScheduledRows rows;
    rows.request = s.request;
    rows.first_position = request.num_computed_tokens;
    rows.num_new_tokens = s.num_new_tokens;
    rows.num_drafts = s.num_drafts;
    const int32_t end = request.num_computed_tokens + s.num_new_tokens;
    const int32_t num_tokens = request.num_tokens();
    DI_CHECK(end <= num_tokens + s.num_drafts && s.num_drafts <= static_cast<int32_t>(request.drafts.size()) &&
                 blocks_for_tokens(end, block_size) <= static_cast<int32_t>(table.size()),
             "sequence " << request.seq_id << " scheduled beyond its tokens, drafts or blocks");
    const auto first_row = static_cast<int32_t>(batch.token_ids.size());
    // A verifying decode as one-token sequences: each row a sequence ending at its own position.
    const bool split = drafts_as_sequences && s.num_drafts > 0 && s.num_new_tokens == s.num_drafts + 1;
    if (split) batch.rows_share_sequences = true;
    for (int32_t pos = rows.first_position; pos < end; ++pos) {
      const int32_t block = table[static_cast<size_t>(pos / block_size)];
      DI_CHECK(block >= 0, "position " << pos << " of sequence " << request.seq_id << " has no block");
      batch.token_ids.push_back(pos < num_tokens ? request.token_at(pos)
                                                 : request.drafts[static_cast<size_t>(pos - num_tokens)]);
      batch.positions.push_back(request.rope_position(pos));
      batch.slot_mapping.push_back(block * block_size + pos % block_size);
      if (!swa_table.empty()) {
        const int32_t swa_block = swa_table[static_cast<size_t>(pos / block_size)];
        DI_CHECK(swa_block >= 0, "position " << pos << " of sequence " << request.seq_id << " has no sliding block");
        batch.swa_slot_mapping.push_back(swa_block * block_size + pos % block_size);
      }
      if (split && pos + 1 < end) {
        batch.query_start.push_back(static_cast<int32_t>(batch.token_ids.size()));
        batch.seq_len.push_back(pos + 1);
        batch.seq_ids.push_back(request.seq_id);
        append_padded_table(batch.block_table, table, max_blocks);
        if (!swa_table.empty()) append_padded_table(batch.swa_block_table, swa_table, max_blocks);
      }
    }
    batch.query_start.push_back(static_cast<int32_t>(batch.token_ids.size()));
    batch.seq_len.push_back(end);
    batch.seq_ids.push_back(request.seq_id);
    append_padded_table(batch.block_table, table, max_blocks);
    if (!swa_table.empty()) append_padded_table(batch.swa_block_table, swa_table, max_blocks);
    add_images(request, rows.first_position, end, first_row, built, mrope_rows);
    rows.samples = end == num_tokens + s.num_drafts;
    // Prompt logprobs: logits at position p score prompt token p + 1.
    if (request.params.prompt_logprobs && rows.first_position < request.num_prompt_tokens() - 1) {
      const int32_t last_scoring = std::min(end, request.num_prompt_tokens() - 1);
      rows.num_prompt_logprob_rows = last_scoring - rows.first_position;
    }
    if (rows.num_prompt_logprob_rows > 0 || rows.samples) {
      rows.first_logit_row = static_cast<int32_t>(batch.logit_rows.size());
      for (int32_t r = 0; r < rows.num_prompt_logprob_rows; ++r) batch.logit_rows.push_back(first_row + r);
      if (rows.samples) {
        for (int32_t d = s.num_drafts; d >= 0; --d) batch.logit_rows.push_back(first_row + s.num_new_tokens - 1 - d);
      }
    }
    built.rows.push_back(rows);
  }
  if (!batch.lookahead.empty()) batch.lookahead.resize(batch.token_ids.size(), 0);
  if (!mrope_rows.empty()) {
    // Text tokens take their one position in every section.
    const size_t n = batch.positions.size();
    batch.mrope_positions.resize(2 * n);
    std::copy(batch.positions.begin(), batch.positions.end(), batch.mrope_positions.begin());
    std::copy(batch.positions.begin(), batch.positions.end(),
              batch.mrope_positions.begin() + static_cast<ptrdiff_t>(n));
    for (const MropeRow& r : mrope_rows) {
      batch.mrope_positions[static_cast<size_t>(r.row)] = r.height;
      batch.mrope_positions[n + static_cast<size_t>(r.row)] = r.width;
    }
  }
  return built;
}

}  // namespace deepinfer
