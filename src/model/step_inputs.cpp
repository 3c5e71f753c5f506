// StepInputs: one pinned-staged copy per step instead of one allocation and copy per field.
#include "model/step_inputs.h"

#include <algorithm>
#include <bit>
#include <cstring>
#include <unordered_map>

#include "core/check.h"
#include "runtime/device_upload.h"

namespace deepinfer {
namespace {

// A view into the packed buffer; the StepInputs owns the memory.
DeviceBuffer view(int32_t* data, size_t count) { return DeviceBuffer(data, count * sizeof(int32_t), [](void*) {}); }

}  // namespace

DeviceBatch StepInputs::upload(Backend& backend, const ForwardBatch& batch, int32_t block_size,
                               const StepExtras& extras) {
  const PaddedShape* shape = extras.shape;
  const int32_t real_seqs = batch.num_seqs();
  DI_CHECK(batch.positions.size() == batch.token_ids.size() && batch.slot_mapping.size() == batch.token_ids.size(),
           "positions and slot_mapping must have one entry per token");
  DI_CHECK(batch.query_start.size() == batch.seq_len.size() + 1, "query_start must have num_seqs + 1 entries");
  DI_CHECK(batch.block_table.size() == batch.seq_len.size() * static_cast<size_t>(batch.max_blocks_per_seq),
           "block_table must be [num_seqs, max_blocks_per_seq]");
  const bool swa = !batch.swa_block_table.empty();
  if (swa) {
    DI_CHECK(batch.swa_slot_mapping.size() == batch.token_ids.size() &&
                 batch.swa_block_table.size() == batch.block_table.size(),
             "swa_slot_mapping and swa_block_table must be shaped as slot_mapping and block_table");
  }
  DI_CHECK(batch.swa_seq_len.empty() || batch.swa_seq_len.size() == batch.seq_len.size(),
           "swa_seq_len must be shaped as seq_len");
  DI_CHECK(batch.lookahead.empty() || (batch.lookahead.size() == batch.token_ids.size() && shape == nullptr),
           "lookahead must have one entry per token, and a padded step takes none");
  DI_CHECK(
      batch.mrope_positions.empty() || (batch.mrope_positions.size() == 2 * batch.token_ids.size() && shape == nullptr),
      "mrope_positions must be [2, num_tokens], and a padded step takes none");
  DI_CHECK(batch.embedding_rows.empty() || shape == nullptr, "a padded step takes no embedding rows");
  const bool takes_draws = !batch.token_from_draw.empty();
  DI_CHECK(!takes_draws || batch.token_from_draw.size() == batch.token_ids.size(),
           "token_from_draw must have one entry per token");
  DI_CHECK(!takes_draws || extras.previous_draws != nullptr,
           "a step taking drawn tokens follows no step that drew any");
  if (shape != nullptr) {
    DI_CHECK(batch.num_tokens() == real_seqs && real_seqs <= shape->num_seqs &&
                 batch.max_blocks_per_seq <= shape->width && batch.swa_seq_len.empty(),
             "a padded step takes one token per sequence and must fit the graph's shape");
  }
  const int32_t num_seqs = shape != nullptr ? shape->num_seqs : real_seqs;
  const int32_t num_tokens = shape != nullptr ? shape->num_seqs : static_cast<int32_t>(batch.num_tokens());
  const int32_t width = shape != nullptr ? shape->width : batch.max_blocks_per_seq;
  const int32_t num_dummies = num_seqs - real_seqs;
  const bool kept_table = shape != nullptr && !swa && batch.seq_ids.size() == static_cast<size_t>(real_seqs);
  if (kept_table) keep_table(backend, num_seqs, width);
  // The kept table's scratch rows (a copy of all its rows) lead the device buffer; host_ lands after them.
  const size_t scratch_ints = kept_table ? static_cast<size_t>(table_rows_) * static_cast<size_t>(width) : 0;

  host_.clear();
  const auto append = [&](const std::vector<int32_t>& values, int32_t pad, int32_t pad_count) {
    const size_t offset = host_.size();
    host_.insert(host_.end(), values.begin(), values.end());
    host_.insert(host_.end(), static_cast<size_t>(pad_count), pad);
    return offset;
  };
  const auto append_table = [&](const std::vector<int32_t>& table) {
    const size_t offset = host_.size();
    for (int32_t s = 0; s < real_seqs; ++s) {
      const auto row = table.begin() + static_cast<ptrdiff_t>(s) * batch.max_blocks_per_seq;
      host_.insert(host_.end(), row, row + batch.max_blocks_per_seq);
      host_.insert(host_.end(), static_cast<size_t>(width - batch.max_blocks_per_seq), 0);
    }
    host_.insert(host_.end(), static_cast<size_t>(num_dummies) * static_cast<size_t>(width), 0);
    return offset;
  };
  const size_t token_ids = append(batch.token_ids, 0, num_dummies);
  const size_t positions = append(batch.positions, 0, num_dummies);
  const size_t slot_mapping = append(batch.slot_mapping, -1, num_dummies);
  const size_t query_start = append(batch.query_start, 0, 0);
  for (int32_t d = 1; d <= num_dummies; ++d) host_.push_back(batch.query_start.back() + d);
  const size_t seq_len = append(batch.seq_len, 1, num_dummies);
  const size_t block_table = kept_table ? 0 : append_table(batch.block_table);
  const size_t swa_slot_mapping = swa ? append(batch.swa_slot_mapping, -1, num_dummies) : 0;
  const size_t swa_block_table = swa ? append_table(batch.swa_block_table) : 0;
  const size_t swa_seq_len = append(batch.swa_seq_len, 0, 0);
  // Always there, so a step that takes draws never moves the buffer a decode graph was captured on.
  const size_t token_from_draw =
      append(batch.token_from_draw, -1, num_tokens - static_cast<int32_t>(batch.token_from_draw.size()));
  const size_t lookahead = append(batch.lookahead, 0, 0);
  const size_t mrope_positions = append(batch.mrope_positions, 0, 0);
  // Embedding rows' floats, bit for bit.
  std::vector<size_t> embedding_offsets;
  for (const ForwardBatch::EmbeddingRows& e : batch.embedding_rows) {
    DI_CHECK(e.num_tokens > 0 && e.first_token >= 0 && e.first_token + e.num_tokens <= batch.num_tokens() &&
                 e.rows != nullptr && extras.hidden_size > 0 && e.num_sets >= 1,
             "embedding rows " << e.first_token << " + " << e.num_tokens << " outside the step's tokens");
    embedding_offsets.push_back(host_.size());
    // Each set's rows one after another.
    const size_t count = static_cast<size_t>(e.num_tokens) * static_cast<size_t>(extras.hidden_size);
    host_.resize(host_.size() + count * static_cast<size_t>(e.num_sets));
    for (int32_t set = 0; set < e.num_sets; ++set) {
      std::memcpy(host_.data() + embedding_offsets.back() + static_cast<size_t>(set) * count,
                  e.rows + set * e.set_stride, count * sizeof(float));
    }
  }

  // The draws' parameters, 8-byte aligned (the buffer's base is).
  constexpr size_t kDrawWords = sizeof(kernels::SampleParams) / sizeof(int32_t);
  static_assert(sizeof(kernels::SampleParams) % sizeof(double) == 0);
  const size_t num_draws = extras.draws != nullptr ? extras.draws->size() : 0;
  if (host_.size() % 2 != 0) host_.push_back(0);
  const size_t draw_params = host_.size();
  const size_t draw_slots = std::max<size_t>(num_draws, shape != nullptr ? static_cast<size_t>(shape->num_seqs) : 0);
  host_.resize(draw_params + draw_slots * kDrawWords, 0);
  if (num_draws > 0) {
    std::memcpy(host_.data() + draw_params, extras.draws->data(), num_draws * sizeof(kernels::SampleParams));
  }

  const size_t table_source =
      kept_table ? append_kept_table(batch, num_seqs, width, scratch_ints) : 0;
  if (!kept_table) rows_sent_ = real_seqs;

  const size_t bytes = host_.size() * sizeof(int32_t);
  // A kept table keeps room to send every row, so a graph's buffer never moves.
  const size_t sent_rows_ints = static_cast<size_t>(rows_sent_) * static_cast<size_t>(width);
  const size_t room =
      (kept_table ? scratch_ints + (host_.size() - sent_rows_ints) + scratch_ints : host_.size()) * sizeof(int32_t);
  try {
    if (device_.size_bytes() < room) device_ = backend.allocate(room);
    backend.copy_to_device(device_.as<int32_t>() + scratch_ints, host_.data(), bytes);
  } catch (...) {
    // The kept rows were not sent: forget them, so the next step sends every row.
    kept_seq_ids_.clear();
    kept_rows_.clear();
    throw;
  }
  auto* base = device_.as<int32_t>() + scratch_ints;
  const auto tokens = static_cast<size_t>(num_tokens);
  const auto seqs = static_cast<size_t>(num_seqs);
  const size_t table_ints = seqs * static_cast<size_t>(width);
  DeviceBatch device;
  device.token_ids = view(base + token_ids, tokens);
  device.positions = view(base + positions, tokens);
  device.slot_mapping = view(base + slot_mapping, tokens);
  device.query_start = view(base + query_start, seqs + 1);
  device.seq_len = view(base + seq_len, seqs);
  if (kept_table) {
    device.block_table = view(table_.as<int32_t>(), table_ints);
    device.rebuild = {table_.as<int32_t>(), device_.as<int32_t>(), base + table_source, table_rows_, num_seqs, width};
  } else {
    device.block_table = view(base + block_table, table_ints);
  }
  device.num_tokens = num_tokens;
  if (num_draws > 0) device.draws = reinterpret_cast<const kernels::SampleParams*>(base + draw_params);
  if (takes_draws || extras.replayed) device.take_from = extras.previous_draws;
  device.draw_of_token = base + token_from_draw;
  for (size_t i = 0; i < batch.embedding_rows.size(); ++i) {
    device.embedding_rows.push_back({batch.embedding_rows[i].first_token, batch.embedding_rows[i].num_tokens,
                                     reinterpret_cast<const float*>(base + embedding_offsets[i]),
                                     batch.embedding_rows[i].num_sets});
  }
  device.paged.num_seqs = num_seqs;
  device.paged.query_start = device.query_start.as<int32_t>();
  device.paged.seq_len = device.seq_len.as<int32_t>();
  device.paged.block_table = device.block_table.as<int32_t>();
  device.paged.max_blocks_per_seq = width;
  device.paged.block_size = block_size;
  device.paged.num_tokens = num_tokens;
  device.paged.max_query_len = num_dummies > 0 ? 1 : 0;
  device.paged.rows_share_sequences = batch.rows_share_sequences;
  if (!batch.lookahead.empty()) device.paged.lookahead = base + lookahead;
  if (!batch.mrope_positions.empty()) device.mrope_positions = view(base + mrope_positions, 2 * tokens);
  for (int32_t s = 0; s < real_seqs; ++s) {
    const auto s_index = static_cast<size_t>(s);
    device.paged.max_query_len =
        std::max(device.paged.max_query_len, batch.query_start[s_index + 1] - batch.query_start[s_index]);
  }
  if (swa) {
    device.swa_slot_mapping = view(base + swa_slot_mapping, tokens);
    device.swa_block_table = view(base + swa_block_table, table_ints);
    device.swa_paged = device.paged;
    device.swa_paged.block_table = device.swa_block_table.as<int32_t>();
    if (!batch.swa_seq_len.empty()) {
      device.swa_seq_len = view(base + swa_seq_len, seqs);
      device.swa_paged.seq_len = device.swa_seq_len.as<int32_t>();
    }
  }
  return device;
}

void StepInputs::keep_table(Backend& backend, int32_t num_seqs, int32_t width) {
  if (table_rows_ >= num_seqs && table_width_ == width) return;
  table_rows_ = static_cast<int32_t>(std::bit_ceil(static_cast<uint32_t>(num_seqs)));
  table_width_ = width;
  // Block 0 everywhere: a dummy row reads its first entry.
  const std::vector<int32_t> zeros(static_cast<size_t>(table_rows_) * static_cast<size_t>(width), 0);
  table_ = upload_vector(backend, zeros);
  kept_seq_ids_.clear();
  kept_rows_.clear();
}

size_t StepInputs::append_kept_table(const ForwardBatch& batch, int32_t num_seqs, int32_t width, size_t scratch_ints) {
  const auto rows = static_cast<size_t>(num_seqs);
  const auto row_ints = static_cast<size_t>(width);
  std::unordered_map<int64_t, size_t> kept_row_of;
  for (size_t p = 0; p < kept_seq_ids_.size(); ++p) kept_row_of.emplace(kept_seq_ids_[p], p);

  // Per row its source: a kept row (in scratch, a copy of the table), a row sent below (past the
  // scratch rows, so the sent rows start at a multiple of width), or -1 (a dummy keeps its row).
  const size_t source = host_.size();
  host_.resize(source + rows, -1);
  host_.resize((scratch_ints + host_.size() + row_ints - 1) / row_ints * row_ints - scratch_ints, 0);
  const size_t first_sent_row = (scratch_ints + host_.size()) / row_ints;
  const auto real = static_cast<size_t>(batch.num_seqs());
  const auto batch_width = static_cast<size_t>(batch.max_blocks_per_seq);
  std::vector<int32_t> new_rows(real * row_ints, 0);
  rows_sent_ = 0;
  for (size_t s = 0; s < real; ++s) {
    const auto row = batch.block_table.begin() + static_cast<ptrdiff_t>(s * batch_width);
    const auto new_row = new_rows.begin() + static_cast<ptrdiff_t>(s * row_ints);
    std::copy(row, row + static_cast<ptrdiff_t>(batch_width), new_row);
    const auto kept = kept_row_of.find(batch.seq_ids[s]);
    if (kept != kept_row_of.end() &&
        std::equal(new_row, new_row + static_cast<ptrdiff_t>(row_ints),
                   kept_rows_.begin() + static_cast<ptrdiff_t>(kept->second * row_ints))) {
      host_[source + s] = static_cast<int32_t>(kept->second);
      continue;
    }
    host_[source + s] = static_cast<int32_t>(first_sent_row + static_cast<size_t>(rows_sent_++));
    host_.insert(host_.end(), new_row, new_row + static_cast<ptrdiff_t>(row_ints));
  }
  kept_seq_ids_ = batch.seq_ids;
  kept_rows_ = std::move(new_rows);
  return source;
}

void finish_inputs(Backend& backend, const DeviceBatch& batch) {
  if (batch.take_from != nullptr) {
    backend.gather_rows(batch.take_from, batch.draw_of_token, batch.num_tokens, 1, batch.token_ids.as<int32_t>());
  }
  const DeviceBatch::TableRebuild& rebuild = batch.rebuild;
  if (rebuild.table != nullptr) {
    backend.gather_rows(rebuild.table, nullptr, rebuild.table_rows, rebuild.width, rebuild.scratch);
    backend.gather_rows(rebuild.scratch, rebuild.source, rebuild.rows, rebuild.width, rebuild.table);
  }
}

}  // namespace deepinfer
