// StepInputs: one pinned-staged copy per step instead of one allocation and copy per field.
#include "model/step_inputs.h"

#include <algorithm>
#include <cstring>

#include "core/check.h"

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
  const size_t block_table = append_table(batch.block_table);
  const size_t swa_slot_mapping = swa ? append(batch.swa_slot_mapping, -1, num_dummies) : 0;
  const size_t swa_block_table = swa ? append_table(batch.swa_block_table) : 0;
  const size_t swa_seq_len = append(batch.swa_seq_len, 0, 0);
  // Always there, so a step that takes draws never moves the buffer a decode graph was captured on.
  const size_t token_from_draw =
      append(batch.token_from_draw, -1, num_tokens - static_cast<int32_t>(batch.token_from_draw.size()));

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

  const size_t bytes = host_.size() * sizeof(int32_t);
  if (device_.size_bytes() < bytes) device_ = backend.allocate(bytes);
  backend.copy_to_device(device_.data(), host_.data(), bytes);

  auto* base = device_.as<int32_t>();
  if (takes_draws) {
    backend.take_drawn_tokens(extras.previous_draws, base + token_from_draw, num_tokens, base + token_ids);
  }
  const auto tokens = static_cast<size_t>(num_tokens);
  const auto seqs = static_cast<size_t>(num_seqs);
  const size_t table_ints = seqs * static_cast<size_t>(width);
  DeviceBatch device;
  device.token_ids = view(base + token_ids, tokens);
  device.positions = view(base + positions, tokens);
  device.slot_mapping = view(base + slot_mapping, tokens);
  device.query_start = view(base + query_start, seqs + 1);
  device.seq_len = view(base + seq_len, seqs);
  device.block_table = view(base + block_table, table_ints);
  device.num_tokens = num_tokens;
  if (num_draws > 0) device.draws = reinterpret_cast<const kernels::SampleParams*>(base + draw_params);
  device.paged.num_seqs = num_seqs;
  device.paged.query_start = device.query_start.as<int32_t>();
  device.paged.seq_len = device.seq_len.as<int32_t>();
  device.paged.block_table = device.block_table.as<int32_t>();
  device.paged.max_blocks_per_seq = width;
  device.paged.block_size = block_size;
  device.paged.num_tokens = num_tokens;
  device.paged.max_query_len = num_dummies > 0 ? 1 : 0;
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

}  // namespace deepinfer
