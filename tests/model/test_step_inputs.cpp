// StepInputs (one packed upload per step) and DecodeGraphs' bucketing, on the host backend: the
// padded layout a decode graph is captured with, field by field; a step scheduled ahead taking its
// tokens from the draws before it, and the draws' parameters riding in the same buffer, which a
// padded shape never moves.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <exception>
#include <memory>
#include <vector>

#include "model/decode_graphs.h"
#include "model/step_inputs.h"
#include "runtime/backend.h"
#include "runtime/fault_injection.h"

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
  EXPECT_EQ(device.take_from, previous.as<int32_t>());
  finish_inputs(*backend, device);
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
  // A replayed step that takes nothing still names the draws, so a graph captured on it takes what
  // later steps ask for; an eager one that takes nothing enqueues no take.
  StepExtras replayed{&shape, previous.as<int32_t>()};
  replayed.replayed = true;
  EXPECT_EQ(inputs.upload(*backend, decode_batch(), 4, replayed).take_from, previous.as<int32_t>());
  StepInputs eager;
  EXPECT_EQ(eager.upload(*backend, decode_batch(), 4, StepExtras{nullptr, previous.as<int32_t>()}).take_from, nullptr);
}

// A decode batch of the given sequences, each with its own block table (lengths from the tables).
ForwardBatch named_batch(const std::vector<int64_t>& seq_ids, const std::vector<std::vector<int32_t>>& tables) {
  ForwardBatch batch;
  batch.seq_ids = seq_ids;
  for (const auto& table : tables) {
    batch.max_blocks_per_seq = std::max(batch.max_blocks_per_seq, static_cast<int32_t>(table.size()));
  }
  batch.query_start = {0};
  for (size_t s = 0; s < tables.size(); ++s) {
    const auto length = static_cast<int32_t>(tables[s].size()) * 4;
    batch.token_ids.push_back(static_cast<int32_t>(100 + s));
    batch.positions.push_back(length - 1);
    batch.slot_mapping.push_back(tables[s].back() * 4 + 3);
    batch.query_start.push_back(static_cast<int32_t>(s + 1));
    batch.seq_len.push_back(length);
    batch.logit_rows.push_back(static_cast<int32_t>(s));
    batch.block_table.insert(batch.block_table.end(), tables[s].begin(), tables[s].end());
    const size_t padding = static_cast<size_t>(batch.max_blocks_per_seq) - tables[s].size();
    batch.block_table.resize(batch.block_table.size() + padding, 0);
  }
  return batch;
}

// The first rows of the device table after the step's finish_inputs, each cut to the batch's tables.
std::vector<std::vector<int32_t>> device_rows(Backend& backend, const DeviceBatch& device,
                                              const std::vector<std::vector<int32_t>>& tables) {
  finish_inputs(backend, device);
  const auto* table = device.block_table.as<int32_t>();
  std::vector<std::vector<int32_t>> rows;
  for (size_t s = 0; s < tables.size(); ++s) {
    const int32_t* row = table + s * static_cast<size_t>(device.paged.max_blocks_per_seq);
    rows.emplace_back(row, row + tables[s].size());
    for (int32_t b = static_cast<int32_t>(tables[s].size()); b < device.paged.max_blocks_per_seq; ++b) {
      EXPECT_EQ(row[b], 0) << "row " << s << " past its table";
    }
  }
  return rows;
}

TEST(StepInputs, KeepsDecodeBlockTablesOnTheDeviceAndSendsOnlyChangedRows) {
  auto backend = make_backend("cpu").value();
  StepInputs inputs;
  const PaddedShape shape{4, 8};
  struct Step {
    std::vector<int64_t> seq_ids;
    std::vector<std::vector<int32_t>> tables;
    int32_t rows_sent;
  };
  const std::vector<Step> steps = {
      {{10, 11, 12}, {{3, 4}, {5}, {6, 7, 8}}, 3},        // all new
      {{10, 11, 12}, {{3, 4}, {5}, {6, 7, 8}}, 0},        // nothing changed
      {{10, 11, 12}, {{3, 4}, {5, 9}, {6, 7, 8}}, 1},     // 11 gained a page
      {{11, 12, 13}, {{5, 9}, {6, 7, 8}, {2}}, 1},        // 10 left: the others move up, 13 is new
      {{12, 11}, {{6, 7, 8}, {5, 9}}, 0},                 // reordered, 13 left
      {{11, 12, 14, 15}, {{5, 9}, {6, 7, 8}, {1}, {12}}, 2},
      {{12}, {{6, 7, 8, 10}}, 1},                         // a page appended, the rest left
  };
  // Padded as a graph's, and unpadded as an eager step's (rows kept from past the step's count).
  StepInputs eager;
  for (size_t i = 0; i < steps.size(); ++i) {
    const ForwardBatch batch = named_batch(steps[i].seq_ids, steps[i].tables);
    const DeviceBatch device = inputs.upload(*backend, batch, 4, StepExtras{&shape});
    EXPECT_EQ(device_rows(*backend, device, steps[i].tables), steps[i].tables) << "step " << i;
    EXPECT_EQ(inputs.rows_sent(), steps[i].rows_sent) << "step " << i;
    EXPECT_EQ(device.paged.block_table, device.block_table.as<int32_t>());
    EXPECT_EQ(device.paged.max_blocks_per_seq, 8);
    EXPECT_EQ(read(device.seq_len).size(), 4u);
    const PaddedShape exact{batch.num_seqs(), 8};
    const DeviceBatch unpadded = eager.upload(*backend, batch, 4, StepExtras{&exact});
    EXPECT_EQ(device_rows(*backend, unpadded, steps[i].tables), steps[i].tables) << "eager step " << i;
    EXPECT_EQ(eager.rows_sent(), steps[i].rows_sent) << "eager step " << i;
  }
  // Without the sequences' ids, or with a table wider than the kept one, every row is sent.
  ForwardBatch unnamed = named_batch({12}, {{6, 7, 8, 10}});
  unnamed.seq_ids.clear();
  const DeviceBatch full = inputs.upload(*backend, unnamed, 4, StepExtras{&shape});
  EXPECT_EQ(full.rebuild.table, nullptr);
  EXPECT_EQ(read(full.block_table), (std::vector<int32_t>{6, 7, 8, 10, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
                                                          0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}));
  const PaddedShape wider{4, 16};
  const std::vector<std::vector<int32_t>> tables = {{6, 7, 8, 10}};
  const DeviceBatch widened = inputs.upload(*backend, named_batch({12}, tables), 4, StepExtras{&wider});
  EXPECT_EQ(device_rows(*backend, widened, tables), tables);
  EXPECT_EQ(inputs.rows_sent(), 1);
}

TEST(StepInputs, KeptTableRowsSurviveStepsThatSendWholeTables) {
  // An eager prefill between two decode steps packs its own table; the kept one stays valid.
  auto backend = make_backend("cpu").value();
  StepInputs inputs;
  const PaddedShape shape{2, 8};
  const std::vector<std::vector<int32_t>> tables = {{3, 4}, {5}};
  (void)device_rows(*backend, inputs.upload(*backend, named_batch({1, 2}, tables), 4, StepExtras{&shape}), tables);
  (void)inputs.upload(*backend, decode_batch(), 4);
  const DeviceBatch device = inputs.upload(*backend, named_batch({1, 2}, tables), 4, StepExtras{&shape});
  EXPECT_EQ(inputs.rows_sent(), 0);
  EXPECT_EQ(device_rows(*backend, device, tables), tables);
}

TEST(StepInputs, AFailedUploadForgetsTheKeptRows) {
  auto faults = std::make_shared<FaultSwitch>();
  auto backend = wrap_with_faults(make_backend("cpu").value(), faults);
  StepInputs inputs;
  const PaddedShape shape{2, 8};
  const std::vector<std::vector<int32_t>> tables = {{3, 4}, {5}};
  (void)device_rows(*backend, inputs.upload(*backend, named_batch({1, 2}, tables), 4, StepExtras{&shape}), tables);
  faults->arm(FaultSpec{FaultKind::kThrow, "copy_to_device", 1});
  const std::vector<std::vector<int32_t>> grown = {{3, 4, 6}, {5}};
  EXPECT_THROW(inputs.upload(*backend, named_batch({1, 2}, grown), 4, StepExtras{&shape}), std::exception);
  // The device never got the grown row: the next step sends both rows, not none.
  const DeviceBatch device = inputs.upload(*backend, named_batch({1, 2}, grown), 4, StepExtras{&shape});
  EXPECT_EQ(inputs.rows_sent(), 2);
  EXPECT_EQ(device_rows(*backend, device, grown), grown);
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
