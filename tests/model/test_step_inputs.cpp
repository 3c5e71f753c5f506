// StepInputs (one packed upload per step) and DecodeGraphs' bucketing, on the host backend: the
// padded layout a decode graph is captured with, field by field; a step scheduled ahead taking its
// tokens from the draws before it, and the draws' parameters riding in the same buffer, which a
// padded shape never moves.
#include <gtest/gtest.h>

#include <cstdint>
#include <exception>
#include <vector>

#include "model/decode_graphs.h"
#include "model/step_inputs.h"
#include "runtime/backend.h"

namespace deepinfer {
namespace {

// Two decode sequences (lengths 5 and 9) with tables 3 blocks wide.
ForwardBatch decode_batch() {
  ForwardBatch batch;
  batch.token_ids = {11, 12};
  batch.positions = {4, 8};
  batch.slot_mapping = {4 * 4 + 0, 7 * 4 + 0};
  batch.query_start = {0, 1, 2};
  batch.seq_len = {5, 9};
  batch.max_blocks_per_seq = 3;
  batch.block_table = {3, 4, 0, 5, 6, 7};
  batch.logit_rows = {0, 1};
  return batch;
}

std::vector<int32_t> read(const DeviceBuffer& buffer) {
  const auto* data = buffer.as<int32_t>();
  return std::vector<int32_t>(data, data + buffer.size_bytes() / sizeof(int32_t));
}

TEST(StepInputs, PadsADecodeBatchToTheGraphShape) {
  auto backend = make_backend("cpu").value();
  StepInputs inputs;
  const PaddedShape shape{4, 8};
  const DeviceBatch device = inputs.upload(*backend, decode_batch(), 4, StepExtras{&shape});
  EXPECT_EQ(read(device.token_ids), (std::vector<int32_t>{11, 12, 0, 0}));
  EXPECT_EQ(read(device.positions), (std::vector<int32_t>{4, 8, 0, 0}));
  EXPECT_EQ(read(device.slot_mapping), (std::vector<int32_t>{16, 28, -1, -1}));
  EXPECT_EQ(read(device.query_start), (std::vector<int32_t>{0, 1, 2, 3, 4}));
  EXPECT_EQ(read(device.seq_len), (std::vector<int32_t>{5, 9, 1, 1}));
  std::vector<int32_t> table(32, 0);
  for (int32_t b : {0, 1, 2}) {
    table[static_cast<size_t>(b)] = decode_batch().block_table[static_cast<size_t>(b)];
    table[8 + static_cast<size_t>(b)] = decode_batch().block_table[3 + static_cast<size_t>(b)];
  }
  EXPECT_EQ(read(device.block_table), table);
  EXPECT_EQ(device.num_tokens, 4);
  EXPECT_EQ(device.paged.num_seqs, 4);
  EXPECT_EQ(device.paged.num_tokens, 4);
  EXPECT_EQ(device.paged.max_query_len, 1);
  EXPECT_EQ(device.paged.max_blocks_per_seq, 8);
  EXPECT_EQ(device.paged.block_size, 4);
  EXPECT_EQ(device.paged.block_table, device.block_table.as<int32_t>());
  EXPECT_EQ(device.swa_paged.block_table, nullptr);
}

TEST(StepInputs, UnpaddedUploadKeepsTheBatch) {
  auto backend = make_backend("cpu").value();
  StepInputs inputs;
  ForwardBatch batch = decode_batch();
  batch.swa_slot_mapping = {1, 2};
  batch.swa_block_table = {9, 8, 7, 6, 5, 4};
  const DeviceBatch device = inputs.upload(*backend, batch, 4);
  EXPECT_EQ(read(device.token_ids), batch.token_ids);
  EXPECT_EQ(read(device.block_table), batch.block_table);
  EXPECT_EQ(read(device.swa_slot_mapping), batch.swa_slot_mapping);
  EXPECT_EQ(read(device.swa_block_table), batch.swa_block_table);
  EXPECT_EQ(device.swa_paged.block_table, device.swa_block_table.as<int32_t>());
  EXPECT_EQ(device.swa_paged.seq_len, device.seq_len.as<int32_t>());
  EXPECT_EQ(device.paged.num_seqs, 2);
  EXPECT_EQ(device.paged.max_blocks_per_seq, 3);
}

TEST(StepInputs, TakesDrawnTokensAndCarriesTheDraws) {
  auto backend = make_backend("cpu").value();
  StepInputs inputs;
  const PaddedShape shape{4, 8};
  DeviceBuffer previous = backend->allocate(3 * sizeof(int32_t));
  const std::vector<int32_t> drawn = {70, 71, 72};
  backend->copy_to_device(previous.data(), drawn.data(), drawn.size() * sizeof(int32_t));
  std::vector<kernels::SampleParams> draws(2);
  draws[0].row = 1;
  draws[0].top_k = 5;
  draws[0].u = 0.25;
  draws[1].row = 0;
  draws[1].temperature = 0.5;

  // A first step without either: the buffer a graph of this shape would be captured on.
  (void)inputs.upload(*backend, decode_batch(), 4, StepExtras{&shape});
  const void* captured_on = inputs.device_data();
  ForwardBatch ahead = decode_batch();
  ahead.token_ids = {-1, 12};
  ahead.token_from_draw = {2, -1};
  const DeviceBatch device = inputs.upload(*backend, ahead, 4, StepExtras{&shape, previous.as<int32_t>(), &draws});
  EXPECT_EQ(read(device.token_ids), (std::vector<int32_t>{72, 12, 0, 0}));
  ASSERT_NE(device.draws, nullptr);
  EXPECT_EQ(device.draws[0].row, 1);
  EXPECT_EQ(device.draws[0].top_k, 5);
  EXPECT_EQ(device.draws[0].u, 0.25);
  EXPECT_EQ(device.draws[1].row, 0);
  EXPECT_EQ(device.draws[1].temperature, 0.5);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(device.draws) % alignof(double), 0u);
  EXPECT_EQ(inputs.device_data(), captured_on) << "a padded shape's buffer moved under its graph";
  // Without a step before it that drew, a take is an error, not garbage input.
  EXPECT_THROW(inputs.upload(*backend, ahead, 4, StepExtras{&shape}), std::exception);
}

TEST(DecodeGraphs, RunsOnlyDecodeStepsThatWantEveryRow) {
  ForwardBatch batch = decode_batch();
  EXPECT_TRUE(DecodeGraphs::can_run(batch));
  batch.logit_rows = {1};
  EXPECT_FALSE(DecodeGraphs::can_run(batch));
  batch.logit_rows = {1, 0};
  EXPECT_FALSE(DecodeGraphs::can_run(batch));
  ForwardBatch prefill = decode_batch();
  prefill.token_ids.push_back(13);
  prefill.positions.push_back(9);
  prefill.slot_mapping.push_back(29);
  prefill.query_start = {0, 1, 3};
  EXPECT_FALSE(DecodeGraphs::can_run(prefill));
  ForwardBatch replay = decode_batch();
  replay.swa_seq_len = {5, 9};
  EXPECT_FALSE(DecodeGraphs::can_run(replay));
}

TEST(DecodeGraphs, ShapesArePowersOfTwo) {
  ForwardBatch batch = decode_batch();
  PaddedShape shape = DecodeGraphs::shape_for(batch);
  EXPECT_EQ(shape.num_seqs, 2);
  EXPECT_EQ(shape.width, DecodeGraphs::kMinWidth);
  batch.max_blocks_per_seq = 9;
  batch.token_ids.push_back(1);
  batch.seq_len.push_back(1);
  shape = DecodeGraphs::shape_for(batch);
  EXPECT_EQ(shape.num_seqs, 4);
  EXPECT_EQ(shape.width, 16);
}

}  // namespace
}  // namespace deepinfer
