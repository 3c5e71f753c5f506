// Gemma 3's image encoder against transformers on any backend (tests/model and tests/cuda):
// tests/data/gemma3_vision (written by tools/reference/make_fixtures_multimodal.py: a 2-layer SigLIP
// tower over a 56 x 56 image in 14-pixel patches, pooled to 4 image tokens) holds the processor's
// pixel values and what transformers computed from them, the tower's last hidden state and the
// projector's rows. The tower runs on those pixels, the projector on transformers' tower output, so
// each stage's error is its own.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <iostream>
#include <string>
#include <vector>

#include "fixtures.h"
#include "float_file.h"
#include "image_prompt_check.h"
#include "model/layers/siglip.h"
#include "model/model.h"
#include "runtime/device_upload.h"
#include "weights/safetensors.h"

namespace deepinfer::testing {

// Gemma 3's logits of tokens holding images: each image's tokens see the whole image (lookahead:
// bidirectional attention inside an image) unless bidirectional is false.
inline std::vector<float> gemma3_logits(CausalLM& lm, const std::vector<int32_t>& tokens,
                                        const std::vector<ImageRowsAt>& images, const std::vector<int32_t>& cuts,
                                        bool bidirectional = true) {
  return logits_with_images(lm, tokens, images, cuts, [&](ForwardBatch& batch, int32_t begin, int32_t end) {
    if (!bidirectional) return;
    for (int32_t p = begin; p < end; ++p) {
      int32_t ahead = 0;
      for (const ImageRowsAt& image : images) {
        if (p >= image.begin && p < image.end) ahead = image.end - 1 - p;
      }
      batch.lookahead.push_back(ahead);
    }
  });
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
  std::unique_ptr<CausalLM> model;
  ASSERT_NO_FATAL_FAILURE(load_image_model(backend, "gemma3_vision", model));
  CausalLM& lm = *model;
  const ImageInputFormat* format = lm.image_input();
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
  const std::vector<ImageRowsAt> images = {{rows, 7, 11}};
  for (int32_t t = 7; t < 11; ++t) ASSERT_EQ(tokens[static_cast<size_t>(t)], 396);
  for (const std::vector<int32_t>& cuts : {std::vector<int32_t>{0, count}, std::vector<int32_t>{0, 5, 20, count}}) {
    SCOPED_TRACE("chunks ending at " + std::to_string(cuts[1]));
    expect_matches_score(expected["score"], gemma3_logits(lm, tokens, images, cuts), vocab);
  }
  EXPECT_GT(largest_change(gemma3_logits(lm, tokens, images, {0, count}),
                           gemma3_logits(lm, tokens, images, {0, count}, false)),
            0.01)
      << "the image's bidirectional attention moved no logit";
}

// The fixture's two-image prompt (two_images.json: text, the fixture's image, text, image2.png,
// text) through load_model on backend: each image encoded from its processor pixels and placed at
// its tokens gives every position's logprobs as transformers', in one forward or in chunks cut at
// each image; zeroing the second image's rows moves the logits (it is read).
inline void expect_gemma3_two_image_prompt_matches_transformers(Backend& backend) {
  const std::string dir = fixture_dir("gemma3_vision");
  std::unique_ptr<CausalLM> model;
  ASSERT_NO_FATAL_FAILURE(load_image_model(backend, "gemma3_vision", model));
  CausalLM& lm = *model;
  const int64_t hidden = lm.config().hidden_size;
  const nlohmann::json two = fixture_json("gemma3_vision", "two_images.json");
  const auto tokens = two["score"]["tokens"].get<std::vector<int32_t>>();
  const auto count = static_cast<int32_t>(tokens.size());
  const auto spans = two_image_spans(two);
  ASSERT_EQ(spans.size(), 2u);
  std::vector<ImageRowsAt> images;
  for (const char* pixel_file : {"pixel_values.f32", "pixel_values2.f32"}) {
    const auto [begin, end] = spans[images.size()];
    ASSERT_EQ(end - begin, 4);
    for (int32_t t = begin; t < end; ++t) ASSERT_EQ(tokens[static_cast<size_t>(t)], 396);
    const std::vector<float> pixels = read_float_file(dir + "/" + pixel_file);
    ASSERT_EQ(pixels.size(), static_cast<size_t>(3 * 56 * 56)) << pixel_file;
    ImageRowsAt image{std::vector<float>(static_cast<size_t>(4 * hidden)), begin, end};
    lm.encode_image(pixels.data(), {}, image.rows.data());
    images.push_back(std::move(image));
  }
  for (const std::vector<int32_t>& cuts :
       {std::vector<int32_t>{0, count}, std::vector<int32_t>{0, spans[0].first, spans[1].first, count}}) {
    SCOPED_TRACE("chunks ending at " + std::to_string(cuts[1]));
    expect_matches_score(two["score"], gemma3_logits(lm, tokens, images, cuts), lm.config().vocab_size);
  }
  std::vector<ImageRowsAt> second_zeroed = images;
  std::fill(second_zeroed[1].rows.begin(), second_zeroed[1].rows.end(), 0.0f);
  EXPECT_GT(largest_change(gemma3_logits(lm, tokens, images, {0, count}),
                           gemma3_logits(lm, tokens, second_zeroed, {0, count})),
            0.01)
      << "the second image moved no logit";
}

}  // namespace deepinfer::testing
