// The checks of a PROMPT engine streaming a prefill's KV (PrefillHandover::kStream), shared by the
// CPU test (test_prefill_kv_stream.cpp) and the CUDA one (tests/cuda): a chunked prompt's pieces,
// put back in the handover's layout, equal byte for byte the KV a copying handover gives for the
// same prompt and steps, every (kind, layer, block) once, the first steps' blocks before the step
// that draws the first token; a second request served from the prefix cache streams it too.
#pragma once

#include <gtest/gtest.h>

#include <map>
#include <mutex>
#include <tuple>

#include "engine/kv_handover.h"
#include "engine/prefill_kv_export.h"
#include "engine_test_util.h"

namespace deepinfer::testing::prefill_kv_stream {

inline constexpr int32_t kBlock = 4;
inline constexpr int32_t kPrompt = 41;  // 11 blocks, the last of one token
inline constexpr int32_t kStepTokens = 16;

inline std::vector<int32_t> prompt() {
  std::vector<int32_t> tokens;
  for (int32_t i = 0; i < kPrompt; ++i) tokens.push_back((i * 37 + 11) % 397);
  return tokens;
}

inline SamplingParams greedy() {
  SamplingParams params;
  params.temperature = 0.0;
  params.max_tokens = 4;
  return params;
}

inline EngineConfig prompt_config() {
  EngineConfig config = small_engine_config(64, kBlock, kStepTokens);
  config.mode = EngineMode::kPrompt;
  return config;
}

// Keeps each piece with the engine step it came in.
class RecordingSink final : public PrefillKvSink {
 public:
  void put(PrefillKvPiece piece) override {
    const std::lock_guard lock(mutex_);
    pieces_.emplace_back(step, std::move(piece));
  }
  std::vector<std::pair<int32_t, PrefillKvPiece>> pieces() const {
    const std::lock_guard lock(mutex_);
    return pieces_;
  }
  int32_t step = 0;  // set by the test between steps

 private:
  mutable std::mutex mutex_;
  std::vector<std::pair<int32_t, PrefillKvPiece>> pieces_;
};

// The pieces laid out as PrefilledRequest::kv and swa_kv; every (kind, layer, block) must come once.
inline void assemble(const CausalLM& model, const std::vector<std::pair<int32_t, PrefillKvPiece>>& pieces,
                     int32_t swa_first_block, std::vector<uint8_t>& kv, std::vector<uint8_t>& swa_kv) {
  const int32_t num_blocks = blocks_for_tokens(kPrompt, kBlock);
  const std::vector<CausalLM::HandoverLayer> layers = model.handover_layers();
  std::map<std::pair<KvLayers, int32_t>, std::pair<int64_t, int64_t>> offset_and_bytes;
  std::map<KvLayers, int64_t> block_bytes;
  for (const CausalLM::HandoverLayer& layer : layers) {
    offset_and_bytes[{layer.layers, layer.index}] = {block_bytes[layer.layers], layer.bytes_per_block};
    block_bytes[layer.layers] += layer.bytes_per_block;
  }
  kv.assign(static_cast<size_t>(num_blocks * block_bytes[KvLayers::kFull]), 0);
  swa_kv.assign(static_cast<size_t>((num_blocks - swa_first_block) * block_bytes[KvLayers::kSliding]), 0);
  std::map<std::tuple<KvLayers, int32_t, int32_t>, int32_t> seen;
  for (const auto& [step, piece] : pieces) {
    const auto [offset, bytes] = offset_and_bytes.at({piece.layers, piece.layer});
    const bool sliding = piece.layers == KvLayers::kSliding;
    const int32_t range_first = sliding ? swa_first_block : 0;
    ASSERT_GE(piece.first_block, range_first);
    ASSERT_LE(piece.first_block + piece.num_blocks, num_blocks);
    ASSERT_EQ(piece.bytes.size(), static_cast<size_t>(piece.num_blocks * bytes));
    for (int32_t b = 0; b < piece.num_blocks; ++b) {
      ++seen[{piece.layers, piece.layer, piece.first_block + b}];
      std::copy_n(
          piece.bytes.begin() + b * bytes, bytes,
          (sliding ? swa_kv : kv).begin() + (piece.first_block + b - range_first) * block_bytes[piece.layers] + offset);
    }
  }
  size_t want = 0;
  for (const CausalLM::HandoverLayer& layer : layers) {
    const int32_t first = layer.layers == KvLayers::kSliding ? swa_first_block : 0;
    want += static_cast<size_t>(num_blocks - first);
    for (int32_t b = first; b < num_blocks; ++b) {
      EXPECT_EQ((seen[{layer.layers, layer.index, b}]), 1) << "layer " << layer.index << " block " << b;
    }
  }
  EXPECT_EQ(seen.size(), want);
}

// The copying handover's PrefilledRequest, and the step (1-based) that handed it over.
inline std::pair<PrefilledRequest, int32_t> run_to_handover(EngineCore& engine, RecordingSink* sink) {
  OutputCollector collector;
  int32_t step = 0;
  std::vector<PrefilledRequest> handed;
  while (engine.has_unfinished_requests()) {
    ++step;
    if (sink != nullptr) sink->step = step;
    collector.absorb(engine.step());
    for (PrefilledRequest& p : engine.take_prefilled()) handed.push_back(std::move(p));
  }
  EXPECT_EQ(handed.size(), 1u);
  return {handed.empty() ? PrefilledRequest{} : std::move(handed.front()), step};
}

// The streaming engine (on `streaming`, async_scheduling as given) against the copying one (on
// `copying`), both on the same weights and backend kind in batch-invariant mode.
inline void expect_stream_equals_copy(CausalLM& copying, CausalLM& streaming, bool async_scheduling = false) {
  EngineCore copy_engine(copying, nullptr, prompt_config());
  ASSERT_TRUE(copy_engine.add_request(0, prompt(), greedy()).ok());
  const PrefilledRequest want = run_to_handover(copy_engine, nullptr).first;

  EngineConfig config = prompt_config();
  config.async_scheduling = async_scheduling;
  EngineCore engine(streaming, nullptr, config);
  for (int64_t request_id : {1, 2}) {  // the second hits the first's cached prefix
    auto sink = std::make_shared<RecordingSink>();
    const Result<void> added = engine.add_request(request_id, prompt(), greedy(), 0, "", TrafficClass::kDefault,
                                                  PrefillHandover::kStream, sink);
    ASSERT_TRUE(added.ok()) << added.error().message;
    const auto [handed, last_step] = run_to_handover(engine, sink.get());
    EXPECT_TRUE(handed.kv.empty());
    EXPECT_EQ(handed.first_token, want.first_token);
    EXPECT_EQ(handed.swa_first_block, want.swa_first_block);
    const std::vector<std::pair<int32_t, PrefillKvPiece>> pieces = sink->pieces();
    std::vector<uint8_t> kv;
    std::vector<uint8_t> swa_kv;
    assemble(streaming, pieces, want.swa_first_block, kv, swa_kv);
    EXPECT_TRUE(kv == want.kv) << "request " << request_id;
    EXPECT_TRUE(swa_kv == want.swa_kv) << "request " << request_id;
    if (request_id == 1) {
      // 41 tokens in 16-token steps: the first two steps' full blocks go before the third.
      EXPECT_EQ(last_step, 3);
      int32_t early_blocks = 0;
      for (const auto& [step, piece] : pieces) early_blocks += step < last_step ? piece.num_blocks : 0;
      EXPECT_GT(early_blocks, 0);
    }
  }
}

}  // namespace deepinfer::testing::prefill_kv_stream
