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
#include <iostream>
#include <string>
#include <vector>

#include "fixtures.h"
#include "float_file.h"
#include "model/layers/siglip.h"
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

// Runs the fixture's tower and projector on backend; each stage within bound of transformers'.
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

}  // namespace deepinfer::testing
