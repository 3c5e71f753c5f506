// Qwen2.5-VL against transformers on any backend (tests/model and tests/cuda): tests/data/qwen2_5_vl
// (written by tools/reference/make_fixtures_multimodal.py: a 2-block windowed tower over a 56 x 84
// image, 4 x 6 patches merged 2 x 2 into 6 image tokens, M-RoPE sections [2, 3, 3]) holds the
// processor's pixel values, the encoder's rows (image_features.f32), the M-RoPE positions
// transformers' get_rope_index gives the score prompt (image.json) and its logprobs.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include "fixtures.h"
#include "float_file.h"
#include "gemma3_vision_check.h"
#include "model/model.h"

namespace deepinfer::testing {

inline nlohmann::json qwen2_vl_image_info() {
  std::ifstream in(fixture_dir("qwen2_5_vl") + "/image.json");
  return nlohmann::json::parse(in);
}

// The fixture through load_model on backend: encode_image's rows within rows_bound of transformers'
// image features; the score prompt with those rows at its image tokens (7..12) and transformers'
// M-RoPE positions gives its logprobs, in one forward or in chunks cut before and after the image.
// With 1D positions the same rows give other logits (the check can fail).
inline void expect_qwen2_vl_matches_transformers(Backend& backend, double rows_bound) {
  const std::string dir = fixture_dir("qwen2_5_vl");
  auto model = load_model(dir, backend, false);
  ASSERT_TRUE(model.ok()) << model.error().message;
  CausalLM& lm = **model;
  const ImageInputFormat* format = lm.image_input();
  ASSERT_NE(format, nullptr);
  EXPECT_EQ(format->preprocessor, ImageInputFormat::Preprocessor::kQwen2Vl);
  EXPECT_EQ(format->image_token_id, 396);
  EXPECT_EQ(format->begin_token_id, 394);
  EXPECT_EQ(format->end_token_id, 395);
  EXPECT_TRUE(format->mrope);
  EXPECT_FALSE(format->bidirectional);
  const nlohmann::json info = qwen2_vl_image_info();
  const auto grid_thw = info["image_grid_thw"].get<std::vector<int32_t>>();
  const ImageGrid grid{grid_thw[0], grid_thw[1], grid_thw[2]};
  ASSERT_EQ(format->tokens_for(grid), 6);
  const int64_t hidden = lm.config().hidden_size;
  const int64_t vocab = lm.config().vocab_size;
  const std::vector<float> pixels = read_float_file(dir + "/pixel_values.f32");
  ASSERT_EQ(static_cast<int64_t>(pixels.size()), format->pixel_count(grid));
  std::vector<float> rows(static_cast<size_t>(6 * hidden));
  lm.encode_image(pixels.data(), grid, rows.data());
  const double rows_error = relative_error(rows, read_float_file(dir + "/image_features.f32"));
  std::cout << backend.name() << ": image rows " << rows_error << " (largest error over largest value)\n";
  EXPECT_LT(rows_error, rows_bound) << "encode_image's rows";

  const nlohmann::json expected = load_expected("qwen2_5_vl");
  const auto tokens = expected["score"]["tokens"].get<std::vector<int32_t>>();
  const auto count = static_cast<int32_t>(tokens.size());
  const auto position_ids = info["position_ids"].get<std::vector<std::vector<int32_t>>>();
  constexpr int32_t kImageBegin = 7;
  constexpr int32_t kImageEnd = 13;
  for (int32_t t = kImageBegin; t < kImageEnd; ++t) ASSERT_EQ(tokens[static_cast<size_t>(t)], 396);
  const auto run = [&](const std::vector<int32_t>& cuts, bool mrope) {
    return logits_with_image_rows(
        lm, tokens, rows, kImageBegin, kImageEnd, cuts, [&](ForwardBatch& batch, int32_t begin, int32_t end) {
          if (!mrope) return;
          for (int32_t p = begin; p < end; ++p) {
            batch.positions[static_cast<size_t>(p - begin)] = position_ids[0][static_cast<size_t>(p)];
          }
          if (std::max(begin, kImageBegin) >= std::min(end, kImageEnd)) return;
          for (int32_t section = 1; section < 3; ++section) {
            for (int32_t p = begin; p < end; ++p) {
              batch.mrope_positions.push_back(position_ids[static_cast<size_t>(section)][static_cast<size_t>(p)]);
            }
          }
        });
  };
  for (const std::vector<int32_t>& cuts : {std::vector<int32_t>{0, count}, std::vector<int32_t>{0, 7, 13, 20, count}}) {
    SCOPED_TRACE("chunks ending at " + std::to_string(cuts[1]));
    expect_matches_score(expected["score"], run(cuts, true), vocab);
  }
  const std::vector<float> with = run({0, count}, true);
  const std::vector<float> flat = run({0, count}, false);
  double moved = 0.0;
  for (size_t i = 0; i < with.size(); ++i) moved = std::max(moved, static_cast<double>(std::fabs(with[i] - flat[i])));
  EXPECT_GT(moved, 0.01) << "M-RoPE's positions moved no logit";
}

}  // namespace deepinfer::testing
