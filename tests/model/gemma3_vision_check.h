// Gemma 3's image encoder against transformers on any backend (tests/model and tests/cuda):
// tests/data/gemma3_vision (written by tools/reference/make_fixtures_multimodal.py: a 2-layer SigLIP
// tower over a 56 x 56 image in 14-pixel patches, pooled to 4 image tokens) holds the processor's
// pixel values and what transformers computed from them, the tower's last hidden state and the
// projector's rows. The tower runs on those pixels, the projector on transformers' tower output, so
// each stage's error is its own.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <iostream>
#include <string>
#include <vector>

#include "fixtures.h"
#include "float_file.h"
#include "model/layers/siglip.h"
#include "model/model.h"
#include "runtime/device_upload.h"
#include "weights/safetensors.h"

namespace deepinfer::testing {

// Largest |got - want| over the largest |want|: the rows' scale, so one bound fits every stage.
inline double relative_error(const std::vector<float>& got, const std::vector<float>& want) {
  double diff = 0.0;
  double scale = 0.0;
  for (size_t i = 0; i < want.size(); ++i) {
    diff = std::max(diff, static_cast<double>(std::fabs(got[i] - want[i])));
    scale = std::max(scale, static_cast<double>(std::fabs(want[i])));
  }
  return diff / scale;
}

// The logits of tokens run through lm in chunks [cuts[c], cuts[c + 1]) over one contiguous cache,
// the image's rows at [image_begin, image_end) in place of those tokens' embeddings (num_sets > 1:
// rows holds that many sets of them, the others DeepStack's); extend adds what the model's images
// need to each chunk's batch (lookahead, M-RoPE positions).
inline std::vector<float> logits_with_image_rows(
    CausalLM& lm, const std::vector<int32_t>& tokens, const std::vector<float>& rows, int32_t image_begin,
    int32_t image_end, const std::vector<int32_t>& cuts,
    const std::function<void(ForwardBatch& batch, int32_t begin, int32_t end)>& extend, int32_t num_sets = 1) {
  constexpr int32_t kBlockSize = 16;
  const auto count = static_cast<int32_t>(tokens.size());
  const int32_t num_blocks = (count + kBlockSize - 1) / kBlockSize;
  const int64_t hidden = lm.config().hidden_size;
  const int64_t vocab = lm.config().vocab_size;
  lm.allocate_kv_cache({num_blocks, kBlockSize});
  std::vector<float> logits(static_cast<size_t>(count * vocab));
  for (size_t c = 0; c + 1 < cuts.size(); ++c) {
    const std::vector<int32_t> chunk(tokens.begin() + cuts[c], tokens.begin() + cuts[c + 1]);
    ForwardBatch batch = contiguous_sequence_batch(chunk, cuts[c], num_blocks);
    const int32_t first = std::max(image_begin, cuts[c]);
    const int32_t end = std::min(image_end, cuts[c + 1]);
    if (first < end) {
      batch.embedding_rows.push_back({first - cuts[c], end - first, rows.data() + (first - image_begin) * hidden,
                                      nullptr, num_sets, (image_end - image_begin) * hidden});
    }
    extend(batch, cuts[c], cuts[c + 1]);
    lm.forward(batch, logits.data() + static_cast<size_t>(cuts[c]) * static_cast<size_t>(vocab));
  }
  return logits;
}

// Runs the fixture's tower and projector on backend; each stage within bound of transformers'.
// (The whole model's image path: expect_gemma3_image_prompt_matches_transformers below.)
inline void expect_gemma3_vision_matches_transformers(Backend& backend, double bound) {
  const std::string dir = fixture_dir("gemma3_vision");
  auto config = ModelConfig::load(dir);
  ASSERT_TRUE(config.ok()) << config.error().message;
  ASSERT_TRUE(config->vision.has_value());
  const VisionConfig& vision = *config->vision;
  EXPECT_EQ(vision.num_patches(), 16);
  EXPECT_EQ(vision.mm_tokens_per_image, 4);
  EXPECT_EQ(vision.image_token_id, 396);
  auto store = WeightStore::open_dir(dir, false);
  ASSERT_TRUE(store.ok()) << store.error().message;
  auto renamed = gemma3_vision_weights(*store);
  ASSERT_TRUE(renamed.ok()) << renamed.error().message;
  ModelSource source;
  source.config = *config;
  source.weights = std::make_shared<const WeightStore>(std::move(*renamed));
  source.backend = &backend;
  source.arena = std::make_shared<WeightArena>();

  auto tower = SiglipVisionTower::load(source, "vision_tower.", vision);
  ASSERT_TRUE(tower.ok()) << tower.error().message;
  auto projector = Gemma3Projector::load(source, "multi_modal_projector.", vision, config->hidden_size);
  ASSERT_TRUE(projector.ok()) << projector.error().message;

  const std::vector<float> pixels = read_float_file(dir + "/pixel_values.f32");
  ASSERT_EQ(pixels.size(), static_cast<size_t>(3 * 56 * 56));
  const std::vector<float> want_hidden = read_float_file(dir + "/vision_hidden.f32");
  const std::vector<float> want_features = read_float_file(dir + "/image_features.f32");
  ASSERT_EQ(want_hidden.size(), static_cast<size_t>(16 * vision.hidden_size));
  ASSERT_EQ(want_features.size(), static_cast<size_t>(4 * config->hidden_size));

  DeviceBuffer hidden = allocate_elements<float>(backend, 16 * vision.hidden_size);
  tower->forward(backend, pixels.data(), hidden.as<float>());
  std::vector<float> got_hidden(want_hidden.size());
  backend.copy_to_host(got_hidden.data(), hidden.data(), got_hidden.size() * sizeof(float));
  const double tower_error = relative_error(got_hidden, want_hidden);

  const DeviceBuffer want_hidden_device = upload_vector(backend, want_hidden);
  DeviceBuffer features = allocate_elements<float>(backend, 4 * config->hidden_size);
  projector->forward(backend, want_hidden_device.as<float>(), features.as<float>());
  std::vector<float> got_features(want_features.size());
  backend.copy_to_host(got_features.data(), features.data(), got_features.size() * sizeof(float));
  const double projector_error = relative_error(got_features, want_features);
  std::cout << backend.name() << ": tower " << tower_error << ", projector " << projector_error
            << " (largest error over largest value)\n";
  EXPECT_LT(tower_error, bound) << "the tower's last hidden state";
  EXPECT_LT(projector_error, bound) << "the projector's image rows";
}

// The fixture through load_model on backend: encode_image's rows within rows_bound of transformers'
// image features, then the score prompt with those rows in place of its image tokens (7..10), whose
// tokens see each other both ways: every position's logprobs as transformers', whether the prompt
// runs in one forward or in chunks that split before and after the image. Without the lookahead
// the same rows give other logprobs (the check can fail).
inline void expect_gemma3_image_prompt_matches_transformers(Backend& backend, double rows_bound) {
  const std::string dir = fixture_dir("gemma3_vision");
  auto model = load_model(dir, backend, false);
  ASSERT_TRUE(model.ok()) << model.error().message;
  CausalLM& lm = **model;
  const ImageInputFormat* format = lm.image_input();
  ASSERT_NE(format, nullptr);
  EXPECT_EQ(format->image_size, 56);
  EXPECT_EQ(format->tokens_per_image, 4);
  EXPECT_EQ(format->image_token_id, 396);
  EXPECT_EQ(format->begin_token_id, 394);
  EXPECT_EQ(format->end_token_id, 395);
  const int64_t hidden = lm.config().hidden_size;
  const int64_t vocab = lm.config().vocab_size;
  const std::vector<float> pixels = read_float_file(dir + "/pixel_values.f32");
  std::vector<float> rows(static_cast<size_t>(4 * hidden));
  lm.encode_image(pixels.data(), {}, rows.data());
  const double rows_error = relative_error(rows, read_float_file(dir + "/image_features.f32"));
  EXPECT_LT(rows_error, rows_bound) << "encode_image's rows";

  const nlohmann::json expected = load_expected("gemma3_vision");
  const auto tokens = expected["score"]["tokens"].get<std::vector<int32_t>>();
  const auto count = static_cast<int32_t>(tokens.size());
  constexpr int32_t kImageBegin = 7;
  constexpr int32_t kImageEnd = 11;
  for (int32_t t = kImageBegin; t < kImageEnd; ++t) ASSERT_EQ(tokens[static_cast<size_t>(t)], 396);
  const auto run = [&](const std::vector<int32_t>& cuts, bool lookahead) {
    return logits_with_image_rows(
        lm, tokens, rows, kImageBegin, kImageEnd, cuts, [&](ForwardBatch& batch, int32_t begin, int32_t end) {
          if (!lookahead) return;
          for (int32_t p = begin; p < end; ++p) {
            batch.lookahead.push_back(p >= kImageBegin && p < kImageEnd ? kImageEnd - 1 - p : 0);
          }
        });
  };
  for (const std::vector<int32_t>& cuts : {std::vector<int32_t>{0, count}, std::vector<int32_t>{0, 5, 20, count}}) {
    SCOPED_TRACE("chunks ending at " + std::to_string(cuts[1]));
    expect_matches_score(expected["score"], run(cuts, true), vocab);
  }
  const std::vector<float> with = run({0, count}, true);
  const std::vector<float> causal = run({0, count}, false);
  double moved = 0.0;
  for (size_t i = 0; i < with.size(); ++i) moved = std::max(moved, static_cast<double>(std::fabs(with[i] - causal[i])));
  EXPECT_GT(moved, 0.01) << "the image's bidirectional attention moved no logit";
}

}  // namespace deepinfer::testing
