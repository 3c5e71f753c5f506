// Qwen2.5-VL and Qwen3-VL against transformers on any backend (tests/model and tests/cuda):
// tests/data/qwen2_5_vl and tests/data/qwen3_vl (written by tools/reference/make_fixtures_multimodal.py:
// a 2-block windowed tower over a 56 x 84 image in 14-pixel patches; a 3-block tower with
// interpolated position embeddings and DeepStack over a 64 x 96 image in 16-pixel patches; both
// 4 x 6 patches merged 2 x 2 into 6 image tokens, M-RoPE sections [2, 3, 3], interleaved for Qwen3-VL)
// hold the processor's pixel values, the encoder's rows (image_features.f32; Qwen3-VL's DeepStack
// rows in deepstack_features.f32), the M-RoPE positions transformers' get_rope_index gives the score
// prompt (image.json) and its logprobs.
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

inline nlohmann::json qwen_vl_image_info(const std::string& fixture = "qwen2_5_vl") {
  std::ifstream in(fixture_dir(fixture) + "/image.json");
  return nlohmann::json::parse(in);
}

// The fixture through load_model on backend: encode_image's rows (and DeepStack's) within
// rows_bound of transformers'; the score prompt with those rows at its image tokens (7..12) and
// transformers' M-RoPE positions gives its logprobs, in one forward or in chunks cut before and
// after the image. With 1D positions, or (Qwen3-VL) without the DeepStack rows, the same rows give
// other logits (the check can fail).
inline void expect_qwen_vl_matches_transformers(Backend& backend, double rows_bound,
                                                const std::string& fixture = "qwen2_5_vl") {
  const std::string dir = fixture_dir(fixture);
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
  const nlohmann::json info = qwen_vl_image_info(fixture);
  const auto grid_thw = info["image_grid_thw"].get<std::vector<int32_t>>();
  const ImageGrid grid{grid_thw[0], grid_thw[1], grid_thw[2]};
  ASSERT_EQ(format->tokens_for(grid), 6);
  const int64_t hidden = lm.config().hidden_size;
  const int64_t vocab = lm.config().vocab_size;
  const std::vector<float> pixels = read_float_file(dir + "/pixel_values.f32");
  ASSERT_EQ(static_cast<int64_t>(pixels.size()), format->pixel_count(grid));
  const int32_t num_sets = 1 + format->deepstack_layers;
  EXPECT_EQ(num_sets, fixture == "qwen3_vl" ? 3 : 1);
  std::vector<float> rows(static_cast<size_t>(format->encoded_values(grid, hidden)));
  lm.encode_image(pixels.data(), grid, rows.data());
  std::vector<float> want = read_float_file(dir + "/image_features.f32");
  if (num_sets > 1) {
    const std::vector<float> deepstack = read_float_file(dir + "/deepstack_features.f32");
    want.insert(want.end(), deepstack.begin(), deepstack.end());
  }
  const double rows_error = relative_error(rows, want);
  std::cout << backend.name() << ": image rows " << rows_error << " (largest error over largest value)\n";
  EXPECT_LT(rows_error, rows_bound) << "encode_image's rows";

  const nlohmann::json expected = load_expected(fixture);
  const auto tokens = expected["score"]["tokens"].get<std::vector<int32_t>>();
  const auto count = static_cast<int32_t>(tokens.size());
  const auto position_ids = info["position_ids"].get<std::vector<std::vector<int32_t>>>();
  constexpr int32_t kImageBegin = 7;
  constexpr int32_t kImageEnd = 13;
  for (int32_t t = kImageBegin; t < kImageEnd; ++t) ASSERT_EQ(tokens[static_cast<size_t>(t)], 396);
  const auto run = [&](const std::vector<int32_t>& cuts, bool mrope, int32_t sets) {
    return logits_with_image_rows(
        lm, tokens, rows, kImageBegin, kImageEnd, cuts,
        [&](ForwardBatch& batch, int32_t begin, int32_t end) {
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
        },
        sets);
  };
  for (const std::vector<int32_t>& cuts : {std::vector<int32_t>{0, count}, std::vector<int32_t>{0, 7, 13, 20, count}}) {
    SCOPED_TRACE("chunks ending at " + std::to_string(cuts[1]));
    expect_matches_score(expected["score"], run(cuts, true, num_sets), vocab);
  }
  const auto largest_change = [](const std::vector<float>& a, const std::vector<float>& b) {
    double moved = 0.0;
    for (size_t i = 0; i < a.size(); ++i) moved = std::max(moved, static_cast<double>(std::fabs(a[i] - b[i])));
    return moved;
  };
  const std::vector<float> with = run({0, count}, true, num_sets);
  EXPECT_GT(largest_change(with, run({0, count}, false, num_sets)), 0.01) << "M-RoPE's positions moved no logit";
  if (num_sets > 1) {
    EXPECT_GT(largest_change(with, run({0, count}, true, 1)), 0.01) << "the DeepStack rows moved no logit";
  }
}

}  // namespace deepinfer::testing
